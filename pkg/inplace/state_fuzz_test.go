package inplace

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// FuzzReadState checks the state annotation as read back from a pod someone edited: refused,
// the error is a *StateError naming the pod and the annotation; accepted, the state passes its
// check on that pod and survives encoding, and working out the pod's next update or revert from
// it gives a step or an error, never a panic, and never a patch of a container the pod lacks.
func FuzzReadState(f *testing.F) {
	const app = `{"name":"app","beforeImage":"reg/app:v1","beforeImageID":"reg/app@sha256:` + "1111111111111111111111111111111111111111111111111111111111111111" + `","afterImage":"reg/app:v2","restartsBefore":2}`
	for _, seed := range []string{
		`{"rolloutID":"r","revision":"rev","startedAt":"2026-03-01T12:00:00Z","stage":"Updating","stageAt":"2026-03-01T12:00:01Z","containers":[` + app + `],"labels":{"controller-revision-hash":{"before":"a","after":"b"}}}`,
		`{"rolloutID":"r","stage":"Updated","containers":[` + app + `]}`,
		`{"rolloutID":"r","stage":"Failed","reason":"CrashLoopBackOff","containers":[` + app + `]}`,
		`{"rolloutID":"r","stage":"Failed","reason":"CrashLoopBackOff: container \"app\": back-off","failure":"CrashLoop","containers":[` + app + `]}`,
		`{"rolloutID":"r","stage":"RollingBack","containers":[{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2","revertImage":"reg/app@sha256:` + strings.Repeat("1", 64) + `"}]}`,
		`{"rolloutID":"r","stage":"Preparing","containers":[{"name":"setup","init":true,"beforeImage":"reg/setup:v1","afterImage":"reg/setup:v2"}]}`,
		`{"rolloutID":"r","stage":"Draining","containers":[` + app + `]}`,
		`{"rolloutID":"r","stage":"RolledBack","containers":[]}`,
		`{"stage":"Done","containers":[` + app + `]}`,
		`{"stage":"Updated","containers":[{"name":"db","beforeImage":"a","afterImage":"b"}]}`,
		`{"stage":"Updated","containers":[{"name":"app","beforeImage":"a","afterImage":"b","restartsBefore":-1}]}`,
		`{"stage":"Updated","containers":[{"name":"app","beforeImage":"a","afterImage":"B"}]}`,
		`{"stage":"Updated","startedAt":"now"}`,
		`{`, `[]`, `null`, `""`, `{}`,
	} {
		f.Add(seed)
	}
	now := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		pod := statePod(t, raw)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "reg/app:v1", ImageID: "reg/app@sha256:" + strings.Repeat("1", 64), Ready: true, RestartCount: 2,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}}
		st, err := ReadState(pod)
		if err != nil {
			var se *StateError
			if !errors.As(err, &se) || st != nil || !strings.HasPrefix(err.Error(), "pod ns/web-0: annotation "+StateAnnotation+" is not ") {
				t.Fatalf("ReadState(%q) = %+v, %T %v; want no state and a *StateError naming the pod and the annotation", raw, st, err, err)
			}
			return
		}
		if raw == "" {
			if st != nil {
				t.Fatalf("ReadState of an empty annotation = %+v", st)
			}
			return
		}
		if st == nil {
			t.Fatalf("ReadState(%q) = no state and no error", raw)
		}
		if err := st.check(pod); err != nil {
			t.Fatalf("ReadState(%q) accepted a state its check refuses: %v", raw, err)
		}
		first := st.encode()
		pod.Annotations[StateAnnotation] = first
		again, err := ReadState(pod)
		if err != nil {
			t.Fatalf("ReadState of the encoded state %s: %v", first, err)
		}
		if second := again.encode(); second != first {
			t.Fatalf("the state changes through encoding:\n first %s\nsecond %s", first, second)
		}
		for _, step := range []func() (Step, error){
			func() (Step, error) {
				return NextUpdate(pod, Target{RolloutID: "r", Images: map[string]string{"app": "reg/app:v2"}}, Options{}, now)
			},
			func() (Step, error) {
				return NextRevert(pod, Options{}, now, func(string, string) (bool, bool) { return true, true })
			},
		} {
			s, err := step()
			if err != nil || s.Patch == nil || s.Subresource != "" {
				continue
			}
			var patch struct {
				Spec struct {
					Containers, InitContainers []struct{ Name string }
				}
			}
			if err := json.Unmarshal(s.Patch, &patch); err != nil {
				t.Fatalf("a step from state %s gives a patch that is not JSON: %s", first, s.Patch)
			}
			for _, c := range patch.Spec.Containers {
				if containerSpec(pod, c.Name, false) == nil {
					t.Fatalf("a step from state %s patches container %q, which the pod lacks: %s", first, c.Name, s.Patch)
				}
			}
			for _, c := range patch.Spec.InitContainers {
				if containerSpec(pod, c.Name, true) == nil {
					t.Fatalf("a step from state %s patches init container %q, which the pod lacks: %s", first, c.Name, s.Patch)
				}
			}
		}
	})
}
