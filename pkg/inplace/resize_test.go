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
