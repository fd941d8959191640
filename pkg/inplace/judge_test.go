package inplace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAnUpdateWithoutGateIsWrittenOnce: without the readiness gate the image patch is the
// update's only write; once the new container runs Ready the step is Done, Updated, with no
// patch, and Judged says Updated from the pod alone.
func TestAnUpdateWithoutGateIsWrittenOnce(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}
	s, err := NextUpdate(testPod(), target, Options{}, t0)
	if err != nil || s.Patch == nil || s.Stage != StageUpdating {
		t.Fatalf("first step = %+v, %v; want the image patch, Updating", s, err)
	}
	pod := apply(t, testPod(), s)
	writes := 1
	for i, kubelet := range []func(*corev1.Pod){
		func(*corev1.Pod) {}, // the kubelet has not acted yet
		func(p *corev1.Pod) { runsV2(p, t0.Add(2*time.Second)) },
	} {
		kubelet(pod)
		now := t0.Add(time.Duration(i+1) * 3 * time.Second)
		s, err := NextUpdate(pod, target, Options{}, now)
		if err != nil {
			t.Fatal(err)
		}
		if s.Patch != nil {
			writes++
			pod = apply(t, pod, s)
		}
		if got := Judged(pod, mustState(t, pod), now); s.Done != (got == StageUpdated) {
			t.Errorf("step %d = %+v, Judged %s: Done only once Judged Updated", i, s, got)
		}
	}
	if writes != 1 || mustState(t, pod).Stage != StageUpdating {
		t.Errorf("%d writes, state stage %s; want the image patch alone, Updating", writes, mustState(t, pod).Stage)
	}
	if got := RanImageIDs(pod, mustState(t, pod)); got[0].AfterImageID != pod.Status.ContainerStatuses[0].ImageID {
		t.Errorf("RanImageIDs = %+v, want the imageID the new container runs", got)
	}
	if got := UpdatedAt(pod, mustState(t, pod)); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("UpdatedAt = %s, want the new container's start, %s", got, t0.Add(2*time.Second))
	}
}

// runsV2 reports, as a kubelet does, the app container restarted on v2 at started, Ready.
func runsV2(p *corev1.Pod, started time.Time) {
	cs := &p.Status.ContainerStatuses[0]
	cs.Image, cs.ImageID = "reg.example/app:v2", "reg.example/app@sha256:"+strings.Repeat("2", 64)
	cs.ContainerID, cs.RestartCount, cs.Ready = "containerd://app-v2", cs.RestartCount+1, true
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}
}

func TestJudged(t *testing.T) {
	patched := func(stage Stage, at time.Time) (*corev1.Pod, *State) {
		p := testPod()
		p.Spec.Containers[0].Image = "reg.example/app:v2"
		before := p.Status.ContainerStatuses[0]
		st := &State{RolloutID: "r1", Stage: stage, StageAt: at, Containers: []ContainerState{{Name: "app", BeforeImage: "reg.example/app:v1",
			BeforeImageID: before.ImageID, FromContainerID: before.ContainerID, AfterImage: "reg.example/app:v2"}}}
		return p, st
	}
	gated := func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: ReadinessGate, Status: corev1.ConditionTrue})
	}
	crashing := func(p *corev1.Pod) {
		runsV2(p, t0)
		cs := &p.Status.ContainerStatuses[0]
		cs.Ready, cs.RestartCount = false, cs.RestartCount+1
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s"}}
	}
	notReadySince := func(at time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}}
		}
	}
	notReady := func(p *corev1.Pod) {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
	}
	// keptOnV2 is a status naming the container the patch replaced, which was started from
	// v2 already (the patch before it, to another image, was never acted on), at generation
	// observed of 3.
	keptOnV2 := func(observed int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Generation, p.Status.ObservedGeneration = 3, observed
			p.Status.ContainerStatuses[0].Image = "reg.example/app:v2"
		}
	}
	tests := []struct {
		name  string
		stage Stage
		at    time.Time // the state's StageAt
		pod   []func(*corev1.Pod)
		want  Stage
		// over is Over: whether the update is over for whoever else finds the pod.
		over bool
	}{
		{"patched, the kubelet still reports the old container", StageUpdating, t0, nil, StageUpdating, false},
		{"the new container runs Ready", StageUpdating, t0, []func(*corev1.Pod){func(p *corev1.Pod) { runsV2(p, t0) }}, StageUpdated, true},
		{"the new container runs, the pod not Ready yet: over for others", StageUpdating, t0, []func(*corev1.Pod){func(p *corev1.Pod) { runsV2(p, t0) }, notReady}, StageUpdating, true},
		{"the new container crash-loops", StageUpdating, t0, []func(*corev1.Pod){crashing}, StageFailed, true},
		{"the container the patch replaced, on v2 already, kept by the sync that read the patch", StageUpdating, t0, []func(*corev1.Pod){keptOnV2(3)}, StageUpdated, true},
		{"the container the patch replaced, on v2 already, before a sync read the patch", StageUpdating, t0, []func(*corev1.Pod){keptOnV2(2)}, StageUpdating, false},
		{"no progress for an hour: only the owner, which knows its deadline, fails it", StageUpdating, t0.Add(-time.Hour), nil, StageUpdating, false},
		{"updated an hour ago, unready since a minute: in flight again for its owner, down for others", StageUpdating, t0.Add(-time.Hour), []func(*corev1.Pod){
			func(p *corev1.Pod) { runsV2(p, t0.Add(-time.Hour+2*time.Second)) }, notReadySince(t0.Add(-time.Minute))}, StageUpdating, true},
		{"with the gate, the end is written: Updating stays", StageUpdating, t0, []func(*corev1.Pod){func(p *corev1.Pod) { runsV2(p, t0) }, gated}, StageUpdating, false},
		{"a written stage is the stage", StageRolledBack, t0, nil, StageRolledBack, true},
		{"draining is draining", StageDraining, t0, nil, StageDraining, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, st := patched(tt.stage, tt.at)
			for _, f := range tt.pod {
				f(p)
			}
			if got := Judged(p, st, t0.Add(time.Second)); got != tt.want {
				t.Errorf("Judged = %s, want %s", got, tt.want)
			}
			if got := Over(p, st, t0.Add(time.Second)); got != tt.over {
				t.Errorf("Over = %v, want %v", got, tt.over)
			}
		})
	}
}

func TestUpdatedAt(t *testing.T) {
	p := testPod()
	runsV2(p, t0.Add(2*time.Second))
	st := &State{Stage: StageUpdating, StageAt: t0, Containers: []ContainerState{{Name: "app"}}}
	if got := UpdatedAt(p, st); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("UpdatedAt = %s, want the container's start", got)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(5 * time.Second))}}
	if got := UpdatedAt(p, st); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("UpdatedAt = %s, want the pod's turn to Ready after it", got)
	}
	st.Stage = StageUpdated
	if got := UpdatedAt(p, st); !got.Equal(t0) {
		t.Errorf("UpdatedAt of a written end = %s, want its StageAt", got)
	}
}

// TestProgressDeadlineFromTheLastTurn: the owner fails an update that makes no progress within
// its deadline, counted from the last progress the pod shows: a pod that ran its new image Ready
// and turned unready a minute ago waits; one unready since its new container started fails.
func TestProgressDeadlineFromTheLastTurn(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}
	patchedAt := t0.Add(-time.Hour)
	tests := []struct {
		name       string
		unreadyAt  time.Time
		wantFailed bool
	}{
		{"unready since a minute", t0.Add(-time.Minute), false},
		{"unready since its start, an hour ago", patchedAt.Add(3 * time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NextUpdate(testPod(), target, Options{}, patchedAt)
			if err != nil {
				t.Fatal(err)
			}
			pod := apply(t, testPod(), s)
			runsV2(pod, patchedAt.Add(2*time.Second))
			pod.Status.ContainerStatuses[0].Ready = false
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(tt.unreadyAt)}}
			step, err := NextUpdate(pod, target, Options{ProgressDeadline: 10 * time.Minute}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if failed := step.Stage == StageFailed && step.Patch != nil; failed != tt.wantFailed {
				t.Errorf("step %+v: failed %v, want %v", step, failed, tt.wantFailed)
			}
		})
	}
}
