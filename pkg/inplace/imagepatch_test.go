package inplace

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// realImagePatch is the image patch NextUpdate's steps send for pod, stepping it from t0 with no
// grace period until the step that patches the images: nil when none does.
func realImagePatch(t *testing.T, pod *corev1.Pod, target Target) []byte {
	t.Helper()
	for range 4 {
		s, err := NextUpdate(pod, target, Options{}, t0)
		if err != nil {
			t.Fatalf("NextUpdate: %v", err)
		}
		if s.Stage == StageUpdating && s.Subresource == "" && s.Patch != nil {
			return s.Patch
		}
		if s.Patch == nil {
			return nil
		}
		pod = apply(t, pod, s)
	}
	t.Fatal("no image patch after 4 steps")
	return nil
}

// TestImagePatchIsTheStepsImagePatch: the patch a dry run sends for a pod is, byte for byte, the
// one the update's image step sends, after whatever steps come before it; none when there is no
// image to patch; and a pod the update refuses is refused alike.
func TestImagePatchIsTheStepsImagePatch(t *testing.T) {
	v2 := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1",
		Labels: map[string]string{"controller-revision-hash": "web-2"}}
	gated := func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: ReadinessGate, Status: corev1.ConditionTrue})
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, p *corev1.Pod) *corev1.Pod
		target  Target
		// none: no image to patch; refused: the error NextUpdate returns too.
		none, refused bool
	}{
		{name: "without a gate: the update's one write", target: v2},
		{name: "with a readiness gate: the write after draining", target: v2,
			prepare: func(_ *testing.T, p *corev1.Pod) *corev1.Pod { gated(p); return p }},
		{name: "a pod draining for this rollout", target: v2, prepare: func(t *testing.T, p *corev1.Pod) *corev1.Pod {
			gated(p)
			s, err := NextUpdate(p, v2, Options{}, t0)
			if err != nil || s.Stage != StageDraining {
				t.Fatalf("first step %+v, %v; want Draining", s, err)
			}
			return apply(t, p, s)
		}},
		{name: "a pod on the target already", target: Target{Images: map[string]string{"proxy": "nginx"}, RolloutID: "r1"}, none: true},
		{name: "a pod whose images this rollout patched", target: v2, none: true, prepare: func(t *testing.T, p *corev1.Pod) *corev1.Pod {
			s, _ := NextUpdate(p, v2, Options{}, t0)
			return apply(t, p, s)
		}},
		{name: "a pod another rollout is updating", target: v2, refused: true, prepare: func(t *testing.T, p *corev1.Pod) *corev1.Pod {
			s, _ := NextUpdate(p, Target{Images: map[string]string{"app": "reg.example/app:v3"}, RolloutID: "other"}, Options{}, t0)
			return apply(t, p, s)
		}},
		{name: "a pod not running", target: v2, refused: true, prepare: func(_ *testing.T, p *corev1.Pod) *corev1.Pod {
			p.Status.Phase = corev1.PodPending
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			if tc.prepare != nil {
				pod = tc.prepare(t, pod)
			}
			got, err := ImagePatch(pod, tc.target, t0)
			if tc.refused {
				_, stepErr := NextUpdate(pod, tc.target, Options{}, t0)
				var ie *IneligibleError
				if !errors.As(err, &ie) || stepErr == nil || err.Error() != stepErr.Error() {
					t.Fatalf("ImagePatch: %v; want NextUpdate's refusal %v", err, stepErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if got != nil {
					t.Fatalf("ImagePatch = %s, want none", got)
				}
				return
			}
			if want := realImagePatch(t, pod, tc.target); string(got) != string(want) {
				t.Fatalf("ImagePatch:\n%s\nthe update's image step sends:\n%s", got, want)
			}
			next := apply(t, pod, Step{Patch: got})
			if next.Spec.Containers[0].Image != "reg.example/app:v2" || next.Labels["controller-revision-hash"] != "web-2" || mustState(t, next).Stage != StageUpdating {
				t.Errorf("patched pod: images %v, labels %v", next.Spec.Containers, next.Labels)
			}
			if next.ResourceVersion != pod.ResourceVersion || !strings.Contains(string(got), `"resourceVersion":"42"`) {
				t.Errorf("the patch carries no resourceVersion precondition: %s", got)
			}
		})
	}
}

// TestImagePatchWithAnImageIDPending: a container with no imageID yet, which the update waits for
// (Preparing), still gets the image patch it will be sent, for a dry run to try now.
func TestImagePatchWithAnImageIDPending(t *testing.T) {
	pod := testPod()
	pod.Status.ContainerStatuses[0].ImageID = ""
	got, err := ImagePatch(pod, Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}, t0.Add(time.Second))
	if err != nil || got == nil {
		t.Fatalf("ImagePatch = %s, %v", got, err)
	}
	if next := apply(t, pod, Step{Patch: got}); next.Spec.Containers[0].Image != "reg.example/app:v2" {
		t.Errorf("images after the patch: %v", next.Spec.Containers)
	}
}
