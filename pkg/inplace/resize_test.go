package inplace

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestResizeOnlySetsTheLabels: an update that changes resources and no image has no image patch
// to carry the labels the target sets (a StatefulSet's revision label), so they are written on
// their own once the resize is applied, before the update ends: without them the workload's
// controller would recreate the pod for a revision it does not carry.
func TestResizeOnlySetsTheLabels(t *testing.T) {
	pod := testPod()
	pod.Labels = map[string]string{"controller-revision-hash": "web-1"}
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	pod.Spec.Containers[0].Resources = cpu("250m")
	pod.Status.ContainerStatuses[0].Resources = ptrTo(cpu("250m"))
	target := Target{Resources: map[string]Resources{"app": cpu("500m")}, RolloutID: "r1",
		Labels: map[string]string{"controller-revision-hash": "web-2"}}

	var stages []Stage
	for range 6 {
		s, err := NextUpdate(pod, target, Options{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, s.Stage)
		pod = apply(t, pod, s)
		if s.Done {
			break
		}
		// The kubelet applies a resize at once.
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	}
	st := mustState(t, pod)
	if st.Stage != StageUpdated {
		t.Fatalf("stage %s after %v, want Updated", st.Stage, stages)
	}
	if got := pod.Labels["controller-revision-hash"]; got != "web-2" {
		t.Errorf("revision label %q once resized, want web-2", got)
	}
	if pod.Spec.Containers[0].Image != "reg.example/app:v1" || !HasResources(pod.Spec.Containers[0].Resources, cpu("500m")) {
		t.Errorf("container %+v, want its image as it was and cpu 500m", pod.Spec.Containers[0])
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestNextAdoptRecordsResources: a pod created from a template with the new resources, and the
// previous image, is adopted as resized only, so the revert resizes it back and leaves its
// image; one already on the previous resources, however spelled, needs nothing.
func TestNextAdoptRecordsResources(t *testing.T) {
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	a := Adoption{RolloutID: "r1", Images: map[string]string{"app": "reg.example/app:v1"}, Resources: map[string]Resources{"app": cpu("250m")}}
	pod := testPod()
	pod.Spec.Containers[0].Resources = cpu("0.25")
	if s, err := NextAdopt(pod, a, t0); err != nil || s.Patch != nil || !s.Done {
		t.Errorf("pod on the previous resources: step %+v, err %v; want done, no write", s, err)
	}

	pod.Spec.Containers[0].Resources = cpu("500m")
	pod.Status.ContainerStatuses[0].Resources = ptrTo(cpu("500m"))
	s, err := NextAdopt(pod, a, t0)
	if err != nil || s.Patch == nil {
		t.Fatalf("step %+v, err %v; want the pod adopted", s, err)
	}
	adopted := apply(t, pod, s)
	st := mustState(t, adopted)
	if len(st.Containers) != 1 || !st.Containers[0].ResizeOnly || st.Containers[0].BeforeResources == nil ||
		!HasResources(*st.Containers[0].BeforeResources, cpu("250m")) || !HasResources(*st.Containers[0].AfterResources, cpu("500m")) {
		t.Fatalf("state = %+v, want app resized only, from 250m to 500m", st)
	}
	s, err = NextRevert(adopted, Options{}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	reverting := apply(t, adopted, s)
	s, err = NextRevert(reverting, Options{}, t0, nil)
	if err != nil || s.Subresource != "resize" {
		t.Fatalf("revert step %+v, err %v; want the resize back", s, err)
	}
	resized := apply(t, reverting, s)
	if !HasResources(resized.Spec.Containers[0].Resources, cpu("250m")) || resized.Spec.Containers[0].Image != "reg.example/app:v1" {
		t.Errorf("after the resize back: %+v, want cpu 250m on the image it ran", resized.Spec.Containers[0])
	}
}
