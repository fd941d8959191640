package inplace

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRefreshAcrossThePatch judges statuses a real kubelet (v1.34.5, containerd) showed after an
// in-place image patch, with the container recorded at the patch: the replaced container still
// reported, Running and Ready or in the kubelet's crash back-off for the patched image, before any
// container of that image ran; and the pod's Ready condition, which must follow the container's.
func TestRefreshAcrossThePatch(t *testing.T) {
	const (
		oldID = "containerd://old"
		newID = "containerd://new"
	)
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	afterID := "reg.example/app@sha256:" + strings.Repeat("3", 64)
	pinnedV1 := "reg.example/app:v1@sha256:" + strings.Repeat("1", 64)
	backOffMsg := "back-off 10s restarting failed container=app pod=web-0_ns(uid-1)"
	// backOff is the kubelet's back-off shown before it starts the patched image: the status
	// keeps the container it killed (containerID, image, imageID) or names it as the last
	// terminated one, and its restart count.
	backOff := func(image, imageID, containerID string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "app", Image: image, ImageID: imageID, ContainerID: containerID, RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: backOffMsg}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: oldID, ExitCode: 0, Reason: "Completed"}}}
	}
	// crashed is a container of the patched image that started and exited 1.
	crashed := func(image, imageID string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "app", Image: image, ImageID: imageID, ContainerID: newID, RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: backOffMsg}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: newID, ExitCode: 1, Reason: "Error"}}}
	}
	runningAs := func(image, imageID, containerID string, restarts int32) corev1.ContainerStatus {
		cs := running("app", image, imageID, restarts)
		cs.ContainerID = containerID
		return cs
	}
	lastGone := func(cs corev1.ContainerStatus) corev1.ContainerStatus {
		cs.ContainerID = ""
		return cs
	}
	pullBackOff := `Back-off pulling image "reg.example/app:v2": ErrImagePull: failed to pull and unpack image "reg.example/app:v2": failed to resolve reference "reg.example/app:v2": reg.example/app:v2: not found: manifest unknown`
	pullFailed := corev1.ContainerStatus{Name: "app", Image: "reg.example/app:v1", ImageID: beforeID, ContainerID: oldID, RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: pullBackOff}}}

	grace := int64(30)
	tests := []struct {
		name      string
		status    corev1.ContainerStatus
		reverting bool // to v1, from v2
		// podReady is the pod's Ready condition; gate, when set, declares the readiness gate
		// with this status.
		podReady corev1.ConditionStatus
		gate     corev1.ConditionStatus
		grace    *int64
		old      bool // a state written before FromContainerID was recorded
		// proxyUnready: the container the update leaves alone is not ready.
		proxyUnready bool
		// generation and observed are the pod's generation and its status.observedGeneration
		// (0: 3, and a kubelet that reports no observedGeneration).
		generation, observed int64
		// revertImage, when set, is the revert's target in place of BeforeImage.
		revertImage string
		// pinnedBefore: BeforeImage is reg.example/app:v1 pinned to its digest.
		pinnedBefore bool
		// afterImage, when set, is the update's target in place of reg.example/app:v2.
		afterImage string
		at         time.Duration
		want       string // done | gate | failed:<substring> | wait:<substring>
	}{
		{name: "back-off before the new image starts, old containerID", status: backOff("reg.example/app:v1", beforeID, oldID, 3),
			want: "wait:the kubelet backs off before starting reg.example/app:v2, no container of it has run yet: " + backOffMsg},
		{name: "back-off naming the old container as the last one", status: lastGone(backOff("reg.example/app:v1", beforeID, oldID, 3)), want: "wait:backs off"},
		{name: "back-off past the deadline", status: backOff("reg.example/app:v1", beforeID, oldID, 3), at: time.Hour, want: "failed:ProgressDeadlineExceeded"},
		{name: "old state: the back-off is blamed as before", status: backOff("reg.example/app:v1", beforeID, oldID, 3), old: true, want: "failed:CrashLoopBackOff"},
		{name: "the new container started and crashed", status: crashed("reg.example/app:v2", afterID, 5),
			want: `failed:CrashLoopBackOff: container "app": ` + backOffMsg + " (last exit: Error, code 1)"},
		{name: "old containerID, but the restart count climbed", status: backOff("reg.example/app:v1", beforeID, oldID, 4), want: "failed:CrashLoopBackOff"},
		{name: "pull failure naming the target", status: pullFailed, want: "failed:ImagePullBackOff: container \"app\": " + pullBackOff},
		{name: "old container Running and Ready after the patch", status: runningAs("reg.example/app:v1", beforeID, oldID, 3), want: "wait:still the container from before the patch"},
		{name: "new container running and ready", status: runningAs("reg.example/app:v2", afterID, newID, 4), want: "done"},
		{name: "new container, pod Ready False", status: runningAs("reg.example/app:v2", afterID, newID, 4), podReady: corev1.ConditionFalse,
			want: "wait:the pod's Ready condition not True yet"},
		{name: "new container, pod Ready False past the deadline", status: runningAs("reg.example/app:v2", afterID, newID, 4), podReady: corev1.ConditionFalse,
			at: time.Hour, want: "failed:ProgressDeadlineExceeded"},
		{name: "new container, pod kept unready by a container the update leaves alone", status: runningAs("reg.example/app:v2", afterID, newID, 4),
			podReady: corev1.ConditionFalse, proxyUnready: true, want: "done"},
		{name: "gate False, containers done: the gate opens", status: runningAs("reg.example/app:v2", afterID, newID, 4),
			podReady: corev1.ConditionFalse, gate: corev1.ConditionFalse, want: "gate"},
		{name: "gate False, old container Ready: not yet", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			podReady: corev1.ConditionFalse, gate: corev1.ConditionFalse, want: "wait:still the container"},
		{name: "gate True, Ready not back yet", status: runningAs("reg.example/app:v2", afterID, newID, 4),
			podReady: corev1.ConditionFalse, gate: corev1.ConditionTrue, want: "wait:Ready condition not True"},
		{name: "gate True, Ready True", status: runningAs("reg.example/app:v2", afterID, newID, 4), gate: corev1.ConditionTrue, want: "done"},
		{name: "grace period extends the deadline", status: runningAs("reg.example/app:v1", beforeID, oldID, 3), grace: &grace,
			at: time.Minute + 29*time.Second, want: "wait:still the container"},
		{name: "deadline after the grace period", status: runningAs("reg.example/app:v1", beforeID, oldID, 3), grace: &grace,
			at: time.Minute + 30*time.Second, want: "failed:ProgressDeadlineExceeded: no progress within 1m30s"},
		{name: "revert after a missing tag: back-off of the killed container", status: backOff("reg.example/app:v1", beforeID, oldID, 3), reverting: true,
			want: "wait:the kubelet backs off before starting reg.example/app:v1"},
		{name: "revert after a missing tag: the killed container Ready again", status: runningAs("reg.example/app:v1", beforeID, oldID, 3), reverting: true,
			want: "wait:still the container from before the patch"},
		{name: "revert after a missing tag: a new container of the old image", status: runningAs("reg.example/app:v1", beforeID, newID, 4), reverting: true, want: "done"},
		{name: "revert: the old image crashes once started", status: crashed("reg.example/app:v1", beforeID, 5), reverting: true, want: "failed:CrashLoopBackOff"},
		// A revert written before the kubelet acted on the update: its next sync reads the
		// reverted spec alone and keeps the container, which the status shows once it reports
		// the revert's generation.
		{name: "revert before the kubelet acted: the container kept, the revert's generation observed", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			reverting: true, generation: 3, observed: 3, want: "done"},
		{name: "revert before the kubelet acted: the revert's generation not observed yet", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			reverting: true, generation: 3, observed: 2, want: "wait:the pod's status describes generation 2, not yet 3"},
		{name: "revert to the digest of the reference the container was started from: the kubelet restarts it", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			reverting: true, revertImage: beforeID, generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		{name: "the container from before the patch, on the target by reference, restarted since", status: runningAs("reg.example/app:v1", beforeID, oldID, 4),
			reverting: true, generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		// The kubelet reports the update's generation while it still stops the container.
		{name: "update's generation observed with the container from before the patch", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			generation: 2, observed: 2, want: "wait:still the container from before the patch"},
		// containerd 1.6 names a container started from REPO:TAG@DIGEST by the image's tag.
		{name: "revert to the pinned reference from before the update, reported by its tag, before the kubelet acted", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			reverting: true, pinnedBefore: true, generation: 3, observed: 3, want: "done"},
		{name: "revert to the pinned reference from before the update, a container of another digest reported by the tag", status: runningAs("reg.example/app:v1", afterID, oldID, 3),
			reverting: true, pinnedBefore: true, generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		{name: "superseded back to the pinned reference of the running image, reported by its tag: a container started from the tag alone restarts", status: runningAs("reg.example/app:v2", afterID, oldID, 3),
			generation: 3, observed: 3, afterImage: "reg.example/app:v2@" + strings.TrimPrefix(afterID, "reg.example/app@"), want: "wait:still the container from before the patch"},
		{name: "superseded back to the image the container runs, before the kubelet acted", status: runningAs("reg.example/app:v2", afterID, oldID, 3),
			generation: 3, observed: 3, want: "done"},
		// A rollout that supersedes another keeps the BeforeImage from before that one, and may
		// return to it: the container from before both, started from that pinned reference,
		// reported by its tag.
		{name: "superseded back to the pinned reference from before the superseded update, reported by its tag, before the kubelet acted", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			pinnedBefore: true, afterImage: pinnedV1, generation: 3, observed: 3, want: "done"},
		{name: "superseded back to the pinned reference from before, its generation not observed yet", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			pinnedBefore: true, afterImage: pinnedV1, generation: 3, observed: 2, want: "wait:the pod's status describes generation 2, not yet 3"},
		{name: "superseded back to the pinned reference from before, the superseded update's container reported by the tag", status: runningAs("reg.example/app:v1", afterID, oldID, 3),
			pinnedBefore: true, afterImage: pinnedV1, generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		{name: "superseded to the pinned form of a BeforeImage named by its tag alone: the kubelet restarts the container", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			afterImage: pinnedV1, generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		{name: "superseded back to the pinned reference from before, a new container of it", status: runningAs("reg.example/app:v1", beforeID, newID, 4),
			pinnedBefore: true, afterImage: pinnedV1, generation: 3, observed: 3, want: "done"},
		// A retag: the update pins the digest the container already runs under another tag, and
		// the kubelet restarts the container for the new reference.
		{name: "update to a pinned retag of the running digest, a new container reported by the new tag", status: runningAs("reg.example/app:stable", beforeID, newID, 4),
			afterImage: "reg.example/app:stable@" + strings.TrimPrefix(beforeID, "reg.example/app@"), generation: 3, observed: 3, want: "done"},
		{name: "update to a pinned retag of the running digest, the container from before the patch", status: runningAs("reg.example/app:v1", beforeID, oldID, 3),
			afterImage: "reg.example/app:stable@" + strings.TrimPrefix(beforeID, "reg.example/app@"), generation: 3, observed: 3, want: "wait:still the container from before the patch"},
		{name: "update to a pinned retag, a new container of another digest reported by the tag", status: runningAs("reg.example/app:stable", beforeID, newID, 4),
			afterImage: "reg.example/app:stable@" + strings.TrimPrefix(afterID, "reg.example/app@"), generation: 3, observed: 3, want: "wait:still running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			after := cmp.Or(tt.afterImage, "reg.example/app:v2")
			pod.Spec.Containers[0].Image = after
			pod.Spec.TerminationGracePeriodSeconds = tt.grace
			pod.Status.ContainerStatuses[0] = tt.status
			if tt.status.State.Running != nil {
				pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Second))
			}
			pod.Status.ContainerStatuses[1].Ready = !tt.proxyUnready
			pod.Generation, pod.Status.ObservedGeneration = 3, 0
			if tt.generation != 0 {
				pod.Generation, pod.Status.ObservedGeneration = tt.generation, tt.observed
			}
			if tt.podReady != "" {
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: tt.podReady}}
			}
			if tt.gate != "" {
				pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
				pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: ReadinessGate, Status: tt.gate})
			}
			c := ContainerState{Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: after,
				RestartsBefore: 3, FromContainerID: oldID, FromRestarts: 3}
			if tt.pinnedBefore {
				c.BeforeImage += "@" + strings.TrimPrefix(beforeID, "reg.example/app@")
			}
			if tt.old {
				c.FromContainerID, c.FromRestarts = "", 0
			}
			st := &State{Stage: StageUpdating, StageAt: t0, Containers: []ContainerState{c}}
			if tt.reverting {
				revert := cmp.Or(tt.revertImage, c.BeforeImage)
				pod.Spec.Containers[0].Image = revert
				st.Stage, st.Containers[0].RevertImage = StageRollingBack, revert
			}
			p := Refresh(pod, st, Options{ProgressDeadline: time.Minute}, t0.Add(tt.at))
			got := "done"
			switch {
			case p.OpenGate:
				got = "gate"
			case p.Failed:
				got = "failed:" + p.Reason
			case !p.Done:
				got = "wait:" + p.Reason
			}
			kind, sub, _ := strings.Cut(tt.want, ":")
			if !strings.HasPrefix(got, kind) || !strings.Contains(got, sub) {
				t.Errorf("Refresh = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPatchesRecordTheReplacedContainer: the write that patches the images, of an update or of
// its revert, with or without the readiness gate, records the containerID and restart count the
// container has at that moment, which the judgement then tells apart from a new container.
func TestPatchesRecordTheReplacedContainer(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}
	unmoved := func(string, string) (bool, bool) { return false, true }
	for _, gate := range []bool{false, true} {
		t.Run(fmt.Sprintf("gate=%v", gate), func(t *testing.T) {
			pod := testPod()
			pod.Status.ContainerStatuses[0] = running("app", "reg.example/app:v1", beforeID, 3)
			pod.Status.ContainerStatuses[0].ContainerID = "containerd://v1"
			if gate {
				pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
				pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: ReadinessGate, Status: corev1.ConditionTrue})
			}
			// patch takes steps until the spec image is img, and returns the pod then.
			patch := func(next func(*corev1.Pod, time.Time) (Step, error), img string) *corev1.Pod {
				t.Helper()
				for i, at := 0, t0; pod.Spec.Containers[0].Image != img; i, at = i+1, at.Add(time.Second) {
					if i > 3 {
						t.Fatalf("image %s not patched after %d steps", img, i)
					}
					s, err := next(pod, at)
					if err != nil {
						t.Fatal(err)
					}
					pod = apply(t, pod, s)
				}
				return pod
			}
			pod = patch(func(p *corev1.Pod, at time.Time) (Step, error) { return NextUpdate(p, target, Options{}, at) }, "reg.example/app:v2")
			if c := mustState(t, pod).Containers[0]; c.FromContainerID != "containerd://v1" || c.FromRestarts != 3 {
				t.Fatalf("update recorded %q, %d; want containerd://v1, 3", c.FromContainerID, c.FromRestarts)
			}
			// The pull of v2 failed; the kubelet had killed the v1 container, whose status it keeps.
			st := mustState(t, pod)
			st.Stage = StageFailed
			pod.Annotations[StateAnnotation] = st.encode()
			pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}
			pod.Status.ContainerStatuses[0].Ready = false
			pod = patch(func(p *corev1.Pod, at time.Time) (Step, error) { return NextRevert(p, Options{}, at, unmoved) }, "reg.example/app:v1")
			if c := mustState(t, pod).Containers[0]; c.FromContainerID != "containerd://v1" || c.FromRestarts != 3 || c.RevertImage != "reg.example/app:v1" {
				t.Fatalf("revert recorded %+v; want containerd://v1, 3", c)
			}
		})
	}
}

// TestReadinessGateOpensBeforeUpdated: with the readiness gate, an update whose containers are
// done first sets the gate True, staying Updating, and is Updated only once the kubelet has set
// the pod Ready after it.
func TestReadinessGateOpensBeforeUpdated(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	afterID := "reg.example/app@sha256:" + strings.Repeat("3", 64)
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}
	pod := testPod()
	pod.Spec.Containers[0].Image = "reg.example/app:v2"
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: ReadinessGate, Status: corev1.ConditionFalse}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	pod.Status.ContainerStatuses[0] = running("app", "reg.example/app:v2", afterID, 1)
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://v2"
	st := &State{RolloutID: "r1", Stage: StageUpdating, StageAt: t0, Containers: []ContainerState{{Name: "app",
		BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2", FromContainerID: "containerd://v1"}}}
	pod.Annotations = map[string]string{StateAnnotation: st.encode()}

	s, err := NextUpdate(pod, target, Options{}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s.Stage != StageUpdating || s.Done || s.Subresource != "status" {
		t.Fatalf("step with the containers done = %+v, want the gate written, still Updating", s)
	}
	pod = apply(t, pod, s)
	if !gateTrue(pod) || PodReady(pod) || mustState(t, pod).Stage != StageUpdating {
		t.Fatalf("after the gate write: gate %v, Ready %v, stage %s", gateTrue(pod), PodReady(pod), mustState(t, pod).Stage)
	}
	// The kubelet has not set Ready yet: wait.
	if s, _ = NextUpdate(pod, target, Options{}, t0.Add(2*time.Second)); s.Patch != nil || s.Done {
		t.Fatalf("step before Ready = %+v, want a wait", s)
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			pod.Status.Conditions[i].Status = corev1.ConditionTrue
		}
	}
	if s, _ = NextUpdate(pod, target, Options{}, t0.Add(3*time.Second)); s.Stage != StageUpdated || !s.Done {
		t.Fatalf("step once Ready = %+v, want Updated", s)
	}
}
