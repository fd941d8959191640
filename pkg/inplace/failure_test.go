package inplace

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLegacyFailure: a Failed state written before states recorded a code is classified from
// the start of its reason, as those versions wrote it; a recorded code wins over the reason.
func TestLegacyFailure(t *testing.T) {
	tests := []struct {
		reason string
		want   FailureCode
	}{
		{"ProgressDeadlineExceeded: no progress within 10m0s: container \"app\": still running reg/app:v1", FailureDeadlineExceeded},
		{"ProgressDeadlineExceeded: container app reported no imageID within 10m0s", FailureDeadlineExceeded},
		{"RestartCountClimbing: container \"app\" restarted 3 times since the update (restart count 0 -> 3)", FailureRestartClimb},
		{"CrashLoopBackOff: container \"app\": back-off 10s (last exit: Error, code 1)", FailureCrashLoop},
		{"ImagePullBackOff: container \"app\": Back-off pulling image \"reg/app:v2\"", FailureImagePull},
		{"ErrImageNeverPull: container \"app\": never pull", FailureImagePull},
		{"InvalidImageName: container \"app\": couldn't parse image name", FailureImagePull},
		{"CreateContainerConfigError: container \"app\": secret \"db\" not found", FailureConfigError},
		{"CreateContainerError: container \"app\": no command", FailureContainerError},
		{"RunContainerError: container \"app\": exec format error", FailureContainerError},
		{"container \"app\" is gone from the pod spec", FailureContainerGone},
		// A failed revert's reason starts with its own words: no code, as before codes.
		{"rollback failed: ProgressDeadlineExceeded: no progress within 10m0s", ""},
		{"rollback failed: CrashLoopBackOff: container \"app\": back-off", ""},
		{"ErrImagePull: container \"app\": retried", ""},
		{"something a person wrote", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			if got := legacyFailure(tt.reason); got != tt.want {
				t.Errorf("legacyFailure = %q, want %q", got, tt.want)
			}
			old := &State{Stage: StageFailed, Reason: tt.reason}
			if got := old.FailureCode(); got != tt.want {
				t.Errorf("FailureCode of a state with no code = %q, want %q", got, tt.want)
			}
		})
	}
	recorded := &State{Stage: StageFailed, Reason: "ProgressDeadlineExceeded: words", Failure: FailureCrashLoop}
	if got := recorded.FailureCode(); got != FailureCrashLoop {
		t.Errorf("FailureCode = %q, want the recorded %q", got, FailureCrashLoop)
	}
}

// TestStateFailureIsOptional: a state written before the code was recorded reads, with no
// code; one with a code keeps it through a write and a read; one with a code no version
// writes is refused.
func TestStateFailureIsOptional(t *testing.T) {
	const app = `"containers":[{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2"}]`
	old, err := ReadState(statePod(t, `{"rolloutID":"r","stage":"Failed","reason":"ProgressDeadlineExceeded: no progress",`+app+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if old.Failure != "" || old.FailureCode() != FailureDeadlineExceeded {
		t.Errorf("old state: failure %q, code %q; want none recorded, %s from its reason", old.Failure, old.FailureCode(), FailureDeadlineExceeded)
	}
	if enc := old.encode(); strings.Contains(enc, `"failure"`) {
		t.Errorf("a state without a code encodes one: %s", enc)
	}
	old.Failure = FailureImagePull
	back, err := ReadState(statePod(t, old.encode()))
	if err != nil || back.Failure != FailureImagePull {
		t.Fatalf("round trip = %+v, %v; want failure %s", back, err, FailureImagePull)
	}
	_, err = ReadState(statePod(t, `{"stage":"Failed","failure":"Oops",`+app+`}`))
	var se *StateError
	if !errors.As(err, &se) || !se.Shape || !strings.Contains(err.Error(), `failure "Oops" is none of ImagePull, CrashLoop`) {
		t.Errorf("ReadState of an unknown code = %v, want a *StateError naming the field", err)
	}
}

// TestFailureRecorded: every way an update or a revert fails writes the Failed state with its
// code beside the reason, and a stage that leaves Failed keeps no code.
func TestFailureRecorded(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	afterID := "reg.example/app@sha256:" + strings.Repeat("3", 64)
	waiting := func(reason, imageID string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "app", Image: "reg.example/app:v2", ImageID: imageID, RestartCount: restarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "msg"}}}
	}
	tests := []struct {
		name   string
		stage  Stage
		status corev1.ContainerStatus
		at     time.Duration
		want   FailureCode
		reason string
	}{
		{name: "crash loop", stage: StageUpdating, status: waiting("CrashLoopBackOff", afterID, 2), want: FailureCrashLoop, reason: "CrashLoopBackOff: "},
		{name: "pull back-off", stage: StageUpdating, status: waiting("ImagePullBackOff", beforeID, 0), want: FailureImagePull, reason: "ImagePullBackOff: "},
		{name: "invalid image name", stage: StageUpdating, status: waiting("InvalidImageName", "", 0), want: FailureImagePull, reason: "InvalidImageName: "},
		{name: "config error", stage: StageUpdating, status: waiting("CreateContainerConfigError", "", 0), want: FailureConfigError, reason: "CreateContainerConfigError: "},
		{name: "container error", stage: StageUpdating, status: waiting("RunContainerError", "", 0), want: FailureContainerError, reason: "RunContainerError: "},
		{name: "restart climb", stage: StageUpdating, status: running("app", "reg.example/app:v2", afterID, 3), want: FailureRestartClimb, reason: "RestartCountClimbing: "},
		{name: "no progress", stage: StageUpdating, status: running("app", "reg.example/app:v1", beforeID, 0), at: time.Hour, want: FailureDeadlineExceeded,
			reason: "ProgressDeadlineExceeded: no progress within"},
		{name: "no imageID while preparing", stage: StagePreparing, status: waiting("ContainerCreating", "", 0), at: time.Hour, want: FailureDeadlineExceeded,
			reason: "ProgressDeadlineExceeded: container app reported no imageID"},
		{name: "revert: the old image crashes", stage: StageRollingBack, status: waiting("CrashLoopBackOff", beforeID, 5), want: FailureCrashLoop,
			reason: "rollback failed: CrashLoopBackOff: "},
		{name: "revert: no progress", stage: StageRollingBack, status: running("app", "reg.example/app:v2", afterID, 1), at: time.Hour, want: FailureDeadlineExceeded,
			reason: "rollback failed: ProgressDeadlineExceeded: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers[0].Image = "reg.example/app:v2"
			pod.Status.ContainerStatuses[0] = tt.status
			if tt.status.State.Running != nil {
				pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Second))
			}
			c := ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2"}
			if tt.stage == StagePreparing {
				c.BeforeImageID = ""
				pod.Spec.Containers[0].Image = "reg.example/app:v1"
			}
			if tt.stage == StageRollingBack {
				pod.Spec.Containers[0].Image, c.RevertImage = "reg.example/app:v1", "reg.example/app:v1"
			}
			st := &State{RolloutID: "r1", Stage: tt.stage, StageAt: t0.Add(-time.Second), Containers: []ContainerState{c}}
			pod.Annotations = map[string]string{StateAnnotation: st.encode()}
			var s Step
			var err error
			if tt.stage == StageRollingBack {
				s, err = NextRevert(pod, Options{}, t0.Add(tt.at), nil)
			} else {
				s, err = NextUpdate(pod, Target{RolloutID: "r1", Images: map[string]string{"app": "reg.example/app:v2"}}, Options{}, t0.Add(tt.at))
			}
			if err != nil || s.Stage != StageFailed {
				t.Fatalf("step = %+v, %v; want Failed", s, err)
			}
			got := mustState(t, apply(t, pod, s))
			if got.Failure != tt.want || got.FailureCode() != tt.want || !strings.HasPrefix(got.Reason, tt.reason) {
				t.Errorf("state written: failure %q, reason %q; want %s, a reason starting %q", got.Failure, got.Reason, tt.want, tt.reason)
			}
		})
	}
	t.Run("container gone", func(t *testing.T) {
		// ReadState refuses such a state; Refresh, given one, still judges it.
		pod := testPod()
		st := &State{Stage: StageUpdating, StageAt: t0, Containers: []ContainerState{{Name: "web", BeforeImage: "reg.example/app:v1", AfterImage: "reg.example/app:v2"}}}
		if p := Refresh(pod, st, Options{}, t0); !p.Failed || p.Code != FailureContainerGone || p.Reason != `container "web" is gone from the pod spec` {
			t.Errorf("Refresh = %+v, want failed with %s", p, FailureContainerGone)
		}
	})
	t.Run("a revert of a failed update keeps no code", func(t *testing.T) {
		pod := testPod()
		pod.Spec.Containers[0].Image = "reg.example/app:v2"
		st := &State{RolloutID: "r1", Stage: StageFailed, Reason: "CrashLoopBackOff: container \"app\": msg", Failure: FailureCrashLoop, StageAt: t0,
			Containers: []ContainerState{{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2"}}}
		pod.Annotations = map[string]string{StateAnnotation: st.encode()}
		s, err := NextRevert(pod, Options{}, t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustState(t, apply(t, pod, s)); got.Stage != StageRollingBack || got.Failure != "" {
			t.Errorf("state after the revert starts: stage %s, failure %q; want RollingBack with none", got.Stage, got.Failure)
		}
	})
}

// TestRefusalAgreesWithNextUpdate: Refusal says, before any step, the refusal NextUpdate gives
// the pod: for good, to wait, or none.
func TestRefusalAgreesWithNextUpdate(t *testing.T) {
	target := Target{RolloutID: "r2", Images: map[string]string{"app": "reg.example/app:v2"}, Supersedes: []string{"r1"}}
	other := func(rollout string, stage Stage, patched bool) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			// The status still shows the container the update replaces, as mid-update.
			before := containerStatus(p, "app", false)
			st := &State{RolloutID: rollout, Stage: stage, StageAt: t0, Containers: []ContainerState{{Name: "app", BeforeImage: "reg.example/app:v1",
				BeforeImageID: before.ImageID, FromContainerID: before.ContainerID, AfterImage: "reg.example/app:v3"}}}
			if patched {
				p.Spec.Containers[0].Image = "reg.example/app:v3"
			}
			p.Annotations = map[string]string{StateAnnotation: st.encode()}
		}
	}
	never := func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }
	tests := []struct {
		name   string
		mutate []func(*corev1.Pod)
		want   string // "" none, "wait:..." or "refuse:..."
	}{
		{name: "a running pod"},
		{name: "restartPolicy Never", mutate: []func(*corev1.Pod){never}, want: "refuse:its restartPolicy is Never"},
		{name: "being deleted", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} }}, want: "refuse:it is being deleted"},
		{name: "unscheduled", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.NodeName = "" }}, want: "wait:not scheduled"},
		{name: "pending", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }}, want: "wait:Pending, not Running"},
		{name: "no status for the container", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Status.ContainerStatuses = p.Status.ContainerStatuses[1:] }},
			want: "wait:has no status yet"},
		{name: "no imageID yet: prepared for", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ImageID = "" }}},
		{name: "another rollout updating it", mutate: []func(*corev1.Pod){other("r0", StageUpdating, true)}, want: `refuse:rollout "r0" is updating it`},
		{name: "another rollout done with it", mutate: []func(*corev1.Pod){other("r0", StageUpdated, true), never}, want: "refuse:restartPolicy"},
		{name: "another rollout's update, its new container running Ready: done with it", mutate: []func(*corev1.Pod){other("r0", StageUpdating, true), never, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0] = running("app", "reg.example/app:v3", "reg.example/app@sha256:"+strings.Repeat("3", 64), 1)
			p.Status.ContainerStatuses[0].ContainerID = "containerd://app-v3"
		}}, want: "refuse:restartPolicy"},
		{name: "another rollout's update, its new container running, not Ready: done with it, the pod down", mutate: []func(*corev1.Pod){other("r0", StageUpdating, true), never, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0] = running("app", "reg.example/app:v3", "reg.example/app@sha256:"+strings.Repeat("3", 64), 1)
			p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].Ready = "containerd://app-v3", false
		}}, want: "refuse:restartPolicy"},
		{name: "a superseded update, patched, finishes first", mutate: []func(*corev1.Pod){other("r1", StageUpdating, true), never}},
		{name: "a superseded update, not patched, is taken over", mutate: []func(*corev1.Pod){other("r1", StageDraining, false), never}, want: "refuse:restartPolicy"},
		{name: "its own update", mutate: []func(*corev1.Pod){other("r2", StageUpdating, true), never}},
		{name: "on the target already, only labels change", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.Containers[0].Image = "reg.example/app:v2" }, never}},
		{name: "a container the pod lacks", mutate: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.Containers[0].Name = "web" }, never}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			for _, m := range tt.mutate {
				m(pod)
			}
			st, err := ReadState(pod)
			if err != nil {
				t.Fatal(err)
			}
			got := Refusal(pod, st, target, t0)
			_, stepErr := NextUpdate(pod, target, Options{}, t0)
			var ie *IneligibleError
			if errors.As(stepErr, &ie) && !ie.ImageIDPending {
				if got == nil || got.Error() != ie.Error() || got.Wait != ie.Wait {
					t.Fatalf("Refusal = %v, NextUpdate refuses with %v", got, ie)
				}
			} else if got != nil {
				t.Fatalf("Refusal = %v, NextUpdate gives %v", got, stepErr)
			}
			kind, sub, _ := strings.Cut(tt.want, ":")
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("Refusal = %v, want none", got)
			case tt.want != "" && (got == nil || got.Wait != (kind == "wait") || !strings.Contains(got.Error(), sub)):
				t.Errorf("Refusal = %v, want %s", got, tt.want)
			}
		})
	}
}
