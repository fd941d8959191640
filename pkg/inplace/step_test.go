package inplace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// apply applies a step's patch to a copy of pod, as the apiserver would (minus validation).
func apply(t *testing.T, pod *corev1.Pod, s Step) *corev1.Pod {
	t.Helper()
	if s.Patch == nil {
		return pod
	}
	orig, _ := json.Marshal(pod)
	out, err := strategicpatch.StrategicMergePatch(orig, s.Patch, corev1.Pod{})
	if err != nil {
		t.Fatalf("applying patch %s: %v", s.Patch, err)
	}
	var next corev1.Pod
	if err := json.Unmarshal(out, &next); err != nil {
		t.Fatal(err)
	}
	return &next
}

func mustState(t *testing.T, pod *corev1.Pod) *State {
	t.Helper()
	st, err := ReadState(pod)
	if err != nil || st == nil {
		t.Fatalf("state: %v %v", st, err)
	}
	return st
}

func TestNextUpdateWritesStateAndImagesTogether(t *testing.T) {
	pod := testPod()
	s, err := NextUpdate(pod, Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}, Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Subresource != "" || s.Stage != StageUpdating {
		t.Fatalf("step = %+v, want a pod patch to Updating", s)
	}
	if !strings.Contains(string(s.Patch), `"resourceVersion":"42"`) {
		t.Errorf("patch carries no resourceVersion: %s", s.Patch)
	}
	next := apply(t, pod, s)
	if next.Spec.Containers[0].Image != "reg.example/app:v2" || next.Spec.Containers[1].Image != "nginx" {
		t.Errorf("images after patch: %v", next.Spec.Containers)
	}
	st := mustState(t, next)
	if len(st.Containers) != 1 || st.Containers[0].BeforeImage != "reg.example/app:v1" ||
		st.Containers[0].BeforeImageID != pod.Status.ContainerStatuses[0].ImageID || st.Containers[0].AfterImage != "reg.example/app:v2" {
		t.Errorf("state = %+v", st)
	}
}

func TestNextUpdateDrainsFirstWithReadinessGate(t *testing.T) {
	pod := testPod()
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: ReadinessGate, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}
	opts := Options{GracePeriod: 5 * time.Second}
	// Not on a whole second, so that rounding the drain time would show.
	start := t0.Add(900 * time.Millisecond)

	s, err := NextUpdate(pod, target, opts, start)
	if err != nil {
		t.Fatal(err)
	}
	if s.Subresource != "status" || s.Stage != StageDraining {
		t.Fatalf("first step = %+v, want a status write to Draining", s)
	}
	pod = apply(t, pod, s)
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionFalse {
			t.Errorf("condition %s = %s after draining, want False", c.Type, c.Status)
		}
	}
	if pod.Spec.Containers[0].Image != "reg.example/app:v1" {
		t.Fatalf("image patched before the grace period")
	}
	// Within the grace period: nothing to write, come back when it ends.
	s, _ = NextUpdate(pod, target, opts, start.Add(2*time.Second))
	if s.Patch != nil || s.RequeueAfter != 3*time.Second {
		t.Fatalf("step within grace = %+v, want a 3s wait", s)
	}
	s, _ = NextUpdate(pod, target, opts, start.Add(4950*time.Millisecond))
	if s.Patch != nil || s.RequeueAfter != 50*time.Millisecond {
		t.Fatalf("step 50ms before the grace period ends = %+v, want a 50ms wait", s)
	}
	s, _ = NextUpdate(pod, target, opts, start.Add(5*time.Second))
	if s.Stage != StageUpdating || s.Subresource != "" {
		t.Fatalf("step after grace = %+v, want the image patch", s)
	}
	if pod = apply(t, pod, s); pod.Spec.Containers[0].Image != "reg.example/app:v2" {
		t.Fatalf("image not patched after grace")
	}
}

func TestRefresh(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	afterID := "reg.example/app@sha256:" + strings.Repeat("3", 64)
	waitingMsg := func(reason, imageID, msg string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "app", Image: "reg.example/app:v1", ImageID: imageID, RestartCount: restarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	waiting := func(reason string, imageID string, restarts int32) corev1.ContainerStatus {
		return waitingMsg(reason, imageID, "msg", restarts)
	}
	// backOff is kubelet v1.34.5's ImagePullBackOff message after a pull of img found no such
	// image: the back-off, then the failed pull's reason and message.
	backOff := func(img string) string {
		return fmt.Sprintf(`Back-off pulling image %q: ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image %q: failed to resolve reference %q: %s: not found`, img, img, img, img)
	}
	runningUnready := func(imageID string, restarts int32) corev1.ContainerStatus {
		cs := running("app", "reg.example/app:v2", imageID, restarts)
		cs.Ready = false
		return cs
	}
	tests := []struct {
		name          string
		status        corev1.ContainerStatus
		failingBefore string
		reverting     bool // to v1, from v2
		soak          time.Duration
		at            time.Time
		want          string // done | failed:<substring> | wait:<substring>
	}{
		{"old instance still running", running("app", "reg.example/app:v1", beforeID, 0), "", false, 0, t0, "wait:still running"},
		{"new image running and ready", running("app", "reg.example/app:v2", afterID, 1), "", false, 0, t0, "done"},
		{"runtime reports another name for a new digest", running("app", "reg.example/app:other", afterID, 1), "", false, 0, t0, "done"},
		{"soak not over", running("app", "reg.example/app:v2", afterID, 1), "", false, time.Hour, t0, "wait:soaking"},
		{"crash loop", waiting("CrashLoopBackOff", afterID, 2), "", false, 0, t0, "failed:CrashLoopBackOff"},
		{"pull failure", waiting("ImagePullBackOff", beforeID, 0), "", false, 0, t0, "failed:ImagePullBackOff"},
		{"first failed pull is retried", waiting("ErrImagePull", beforeID, 0), "", false, 0, t0, "wait:ErrImagePull"},
		{"restart climbing", running("app", "reg.example/app:v2", afterID, 3), "", false, 0, t0, "failed:RestartCountClimbing"},
		{"pre-existing crash, old instance", waiting("CrashLoopBackOff", beforeID, 5), "CrashLoopBackOff", false, 0, t0, "wait:as before the update"},
		{"pre-existing crash, new image crashes as before", waiting("CrashLoopBackOff", afterID, 6), "CrashLoopBackOff", false, 0, t0, "done:already in CrashLoopBackOff before the update"},
		{"pre-existing crash, new image between two crashes", runningUnready(afterID, 7), "CrashLoopBackOff", false, 0, t0, "done:RestartCountClimbing"},
		{"pre-existing crash, new image starting", runningUnready(afterID, 1), "CrashLoopBackOff", false, 0, t0, "wait:not Running and Ready yet"},
		{"pre-existing crash, new image fixes it", running("app", "reg.example/app:v2", afterID, 6), "CrashLoopBackOff", false, 0, t0, "done"},
		{"pre-existing crash, new image fails to pull", waitingMsg("ImagePullBackOff", beforeID, `Back-off pulling image "reg.example/app:v2"`, 5), "CrashLoopBackOff", false, 0, t0, "failed:pre-existing"},
		{"no progress past the deadline", running("app", "reg.example/app:v1", beforeID, 0), "", false, 0, t0.Add(time.Hour), "failed:ProgressDeadlineExceeded"},
		{"invalid image name, with the kubelet's message", waitingMsg("InvalidImageName", "", "couldn't parse image name", 0), "", false, 0, t0, `failed:InvalidImageName: container "app": couldn't parse image name`},
		{"container config error, with the kubelet's message", waitingMsg("CreateContainerConfigError", "", `secret "db" not found`, 0), "", false, 0, t0, `failed:CreateContainerConfigError: container "app": secret "db" not found`},
		{"a soak longer than the deadline is progress", running("app", "reg.example/app:v2", afterID, 1), "", false, 3 * time.Hour, t0.Add(time.Hour), "wait:soaking"},
		{"revert: stale crash of the image being left", waiting("CrashLoopBackOff", afterID, 4), "", true, 0, t0, "wait:of the image it is leaving"},
		{"revert: stale pull failure of the image being left", waitingMsg("ImagePullBackOff", "", `Back-off pulling image "reg.example/app:v2"`, 0), "", true, 0, t0, "wait:of the image it is leaving"},
		{"revert: the old image fails to pull", waitingMsg("ImagePullBackOff", "", `Back-off pulling image "reg.example/app:v1"`, 0), "", true, 0, t0, "failed:ImagePullBackOff"},
		{"pull failure, the back-off naming its cause", waitingMsg("ImagePullBackOff", beforeID, backOff("reg.example/app:v2"), 0), "", false, 0, t0,
			`failed:ImagePullBackOff: container "app": Back-off pulling image "reg.example/app:v2": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image "reg.example/app:v2": failed to resolve reference "reg.example/app:v2": reg.example/app:v2: not found`},
		{"pre-existing crash, new image fails to pull, the back-off naming its cause", waitingMsg("ImagePullBackOff", beforeID, backOff("reg.example/app:v2"), 5), "CrashLoopBackOff", false, 0, t0, "failed:reg.example/app:v2: not found (pre-existing"},
		{"revert: stale pull failure of the image being left, naming its cause", waitingMsg("ImagePullBackOff", "", backOff("reg.example/app:v2"), 0), "", true, 0, t0, "wait:of the image it is leaving"},
		{"revert: the old image fails to pull, the back-off naming its cause", waitingMsg("ImagePullBackOff", "", backOff("reg.example/app:v1"), 0), "", true, 0, t0, "failed:reg.example/app:v1: not found"},
		{"revert: the old image crashes", waiting("CrashLoopBackOff", beforeID, 5), "", true, 0, t0, "failed:CrashLoopBackOff"},
		{"revert: back on the old image", running("app", "reg.example/app:v1", beforeID, 5), "", true, 0, t0, "done"},
		{"revert: no progress past the deadline", waiting("CrashLoopBackOff", afterID, 4), "", true, 0, t0.Add(time.Hour), "failed:ProgressDeadlineExceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers[0].Image = "reg.example/app:v2"
			pod.Status.ContainerStatuses[0] = tt.status
			st := &State{Stage: StageUpdating, StageAt: t0.Add(-time.Second), Containers: []ContainerState{{
				Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2", FailingBefore: tt.failingBefore,
			}}}
			if tt.reverting {
				pod.Spec.Containers[0].Image = "reg.example/app:v1"
				st.Stage, st.Containers[0].RevertImage = StageRollingBack, "reg.example/app:v1"
				if tt.status.ImageID == afterID {
					pod.Status.ContainerStatuses[0].Image = "reg.example/app:v2"
				}
			}
			if tt.status.State.Running != nil {
				pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Second))
			}
			p := Refresh(pod, st, Options{Soak: tt.soak}, tt.at)
			got := "done"
			switch {
			case p.Done && p.Unhealthy != "":
				got = "done:" + p.Unhealthy
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

// TestRefreshIgnoresAStatusOlderThanThePatch replays statuses recorded before the image patch
// (observedGeneration below the patched generation): whatever they say, the update neither
// completes nor fails on them, until the deadline.
func TestRefreshIgnoresAStatusOlderThanThePatch(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	afterID := "reg.example/app@sha256:" + strings.Repeat("3", 64)
	crashing := corev1.ContainerStatus{Name: "app", Image: "reg.example/app:v2", ImageID: afterID, RestartCount: 4,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	tests := []struct {
		name               string
		status             corev1.ContainerStatus
		generation, served int64
		at                 time.Time
		want               string // done | failed:<substring> | wait:<substring>
	}{
		{"stale status that looks done", running("app", "reg.example/app:v2", afterID, 1), 2, 1, t0, "wait:describes generation 1, not yet 2"},
		{"stale status that looks failed", crashing, 2, 1, t0, "wait:describes generation 1, not yet 2"},
		{"stale status past the deadline", running("app", "reg.example/app:v2", afterID, 1), 2, 1, t0.Add(time.Hour), "failed:ProgressDeadlineExceeded"},
		{"status of the patched generation, done", running("app", "reg.example/app:v2", afterID, 1), 2, 2, t0, "done"},
		{"status of the patched generation, failed", crashing, 2, 2, t0, "failed:CrashLoopBackOff"},
		{"status of a later generation", running("app", "reg.example/app:v2", afterID, 1), 2, 3, t0, "done"},
		{"a kubelet that does not write observedGeneration", running("app", "reg.example/app:v2", afterID, 1), 2, 0, t0, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Generation = tt.generation
			pod.Spec.Containers[0].Image = "reg.example/app:v2"
			pod.Status.ObservedGeneration = tt.served
			pod.Status.ContainerStatuses[0] = tt.status
			if tt.status.State.Running != nil {
				pod.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Second))
			}
			st := &State{Stage: StageUpdating, StageAt: t0.Add(-time.Second), Containers: []ContainerState{{
				Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2",
			}}}
			p := Refresh(pod, st, Options{}, tt.at)
			got := "done"
			switch {
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

func TestCanUpdate(t *testing.T) {
	plan := Plan{Changes: []Change{{Container: "app", From: "reg.example/app:v1", To: "reg.example/app:v2"}}}
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string // "" ok, "wait:..." or "refuse:..."
	}{
		{"running pod", func(*corev1.Pod) {}, ""},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} }, "refuse:being deleted"},
		{"restartPolicy Never", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }, "refuse:restartPolicy is Never"},
		{"unscheduled", func(p *corev1.Pod) { p.Spec.NodeName = "" }, "wait:not scheduled"},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, "wait:Pending, not Running"},
		{"no imageID yet", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ImageID = "" }, "wait:has not reported an imageID yet"},
		{"never started because its pull fails", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].ImageID = ""
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			tt.mutate(pod)
			err := CanUpdate(pod, plan)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CanUpdate = %v, want nil", err)
				}
				return
			}
			kind, sub, _ := strings.Cut(tt.want, ":")
			var ie *IneligibleError
			if !errors.As(err, &ie) || ie.Wait != (kind == "wait") || !strings.Contains(err.Error(), sub) {
				t.Fatalf("CanUpdate = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestNextRevertPinsDigestUnlessTagKnownUnmoved(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	pod := testPod()
	pod.Spec.Containers[0].Image = "reg.example/app:v2"
	st := &State{RolloutID: "r1", Stage: StageFailed, StageAt: t0, Containers: []ContainerState{{
		Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2"}}}
	pod.Annotations = map[string]string{StateAnnotation: st.encode()}
	tests := []struct {
		name     string
		tagMoved TagMoved
		want     string
	}{
		{"unknown: pin the digest", nil, "reg.example/app@sha256:" + strings.Repeat("1", 64)},
		{"tag moved: pin the digest", func(string, string) (bool, bool) { return true, true }, "reg.example/app@sha256:" + strings.Repeat("1", 64)},
		{"tag unmoved: the tag", func(string, string) (bool, bool) { return false, true }, "reg.example/app:v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NextRevert(pod, Options{}, t0, tt.tagMoved)
			if err != nil {
				t.Fatal(err)
			}
			next := apply(t, pod, s)
			if got := next.Spec.Containers[0].Image; got != tt.want {
				t.Errorf("revert image = %q, want %q", got, tt.want)
			}
			if got := mustState(t, next); got.Stage != StageRollingBack || got.Containers[0].BeforeImage != "reg.example/app:v1" {
				t.Errorf("state after revert write = %+v", got)
			}
		})
	}
}

// BenchmarkRefresh10Containers judges a pod whose 10 updated containers are done: the spec
// spells each image as the runtime reports it, or (as for Docker Hub images) it does not.
func BenchmarkRefresh10Containers(b *testing.B) {
	for _, bb := range []struct{ name, spec, reported string }{
		{"same-spelling", "reg.example/app:v2", "reg.example/app:v2"},
		{"runtime-spelling", "app:v2", "docker.io/library/app:v2"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			pod := testPod()
			st := &State{Stage: StageUpdating, StageAt: t0}
			pod.Spec.Containers, pod.Status.ContainerStatuses = nil, nil
			for i := range 10 {
				name := fmt.Sprintf("c%d", i)
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: name, Image: bb.spec})
				cs := running(name, bb.reported, fmt.Sprintf("docker.io/library/app@sha256:%064d", i+100), 1)
				cs.State.Running.StartedAt = metav1.NewTime(t0.Add(-time.Minute))
				pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
				st.Containers = append(st.Containers, ContainerState{Name: name, BeforeImage: "app:v1",
					BeforeImageID: fmt.Sprintf("docker.io/library/app@sha256:%064d", i), AfterImage: bb.spec})
			}
			b.ReportAllocs()
			for b.Loop() {
				if p := Refresh(pod, st, Options{}, t0); !p.Done {
					b.Fatalf("not done: %s", p.Reason)
				}
			}
		})
	}
}

func TestNextUpdateRecordsStateFirstWhenAnImageIDIsMissing(t *testing.T) {
	pod := testPod()
	pod.Status.ContainerStatuses[0].ImageID = ""
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"}

	s, err := NextUpdate(pod, target, Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stage != StagePreparing || s.Patch == nil {
		t.Fatalf("first step = %+v, want the state written at Preparing", s)
	}
	pod = apply(t, pod, s)
	if pod.Spec.Containers[0].Image != "reg.example/app:v1" {
		t.Fatal("images patched before the imageID was known")
	}
	// Still no imageID: wait, write nothing.
	if s, _ = NextUpdate(pod, target, Options{}, t0.Add(time.Second)); s.Patch != nil || s.Stage != StagePreparing {
		t.Fatalf("step without an imageID = %+v, want a wait", s)
	}
	// The container reports its imageID: the images are patched with it recorded.
	id := "reg.example/app@sha256:" + strings.Repeat("4", 64)
	pod.Status.ContainerStatuses[0] = running("app", "reg.example/app:v1", id, 0)
	s, err = NextUpdate(pod, target, Options{}, t0.Add(2*time.Second))
	if err != nil || s.Stage != StageUpdating {
		t.Fatalf("step with the imageID = %+v, %v; want Updating", s, err)
	}
	pod = apply(t, pod, s)
	if st := mustState(t, pod); pod.Spec.Containers[0].Image != "reg.example/app:v2" || st.Containers[0].BeforeImageID != id {
		t.Errorf("after the second write: image %s, state %+v", pod.Spec.Containers[0].Image, st.Containers[0])
	}
}

func TestTargetOnTheCurrentImageIsANoOp(t *testing.T) {
	const want = "no change: proxy already on the target image"
	tests := []struct {
		name             string
		podImage, target string
	}{
		{"short name in the pod, full reference as the target", "nginx", "docker.io/library/nginx:latest"},
		{"full reference in the pod, short name as the target", "docker.io/library/nginx:latest", "nginx"},
		{"implicit latest tag", "nginx", "nginx:latest"},
		{"implicit library repository", "library/nginx", "nginx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers[1].Image = tt.podImage
			target := Target{Images: map[string]string{"proxy": tt.target}, RolloutID: "r1"}

			plan, err := Diff(pod, target)
			if err != nil {
				t.Fatal(err)
			}
			if !plan.NoOp() || plan.String() != want {
				t.Errorf("plan = %q (NoOp %v), want %q", plan, plan.NoOp(), want)
			}

			s, err := NextUpdate(pod, target, Options{}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Done || s.Patch != nil || s.Subresource != "" || s.Event != nil || s.Reason != want {
				t.Errorf("step: done %v, patch %s, subresource %q, event %v, reason %q; want done with no patch and no event, reason %q",
					s.Done, s.Patch, s.Subresource, s.Event, s.Reason, want)
			}

			// Through the Updater: the one read, and no write (pod patch or Event) at all.
			client := fake.NewClientset(pod)
			events := newEventBroadcaster(t, client, nil)
			u := &Updater{Client: client, Events: events.Recorder("test"), Now: func() time.Time { return t0 }}
			res, err := u.Update(context.Background(), "ns", "web-0", target)
			if err != nil {
				t.Fatal(err)
			}
			// Close waits for the writes of every Event recorded: after it, all are in Actions.
			if err := events.Close(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			if !res.Done || res.Wrote || res.Reason != want {
				t.Errorf("result = %+v, want Done without a write, reason %q", res, want)
			}
			var sent []string
			for _, a := range client.Actions() {
				sent = append(sent, a.GetVerb()+" "+a.GetResource().Resource)
			}
			if want := []string{"get pods"}; !slices.Equal(sent, want) {
				t.Errorf("the updater sent %v, want %v", sent, want)
			}
		})
	}
}

// TestLabelsAndAnnotationsGoWithTheImages: a target's labels and annotations are written in the
// image patch (an empty value removes the key), recorded with the values before, and a revert
// puts those back (removing a key the update added) in its own image patch.
func TestLabelsAndAnnotationsGoWithTheImages(t *testing.T) {
	pod := testPod()
	pod.Labels = map[string]string{"controller-revision-hash": "web-1", "app.kubernetes.io/version": "1.0", "stale": "x"}
	pod.Annotations = map[string]string{"checksum/config": "aaa", "gone": "y"}
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1",
		Labels:      map[string]string{"controller-revision-hash": "web-2", "app.kubernetes.io/version": "2.0", "stale": "", "added": "z"},
		Annotations: map[string]string{"checksum/config": "bbb", "gone": "", "new": "n"}}
	s, err := NextUpdate(pod, target, Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	updated := apply(t, pod, s)
	wantLabels := map[string]string{"controller-revision-hash": "web-2", "app.kubernetes.io/version": "2.0", "added": "z"}
	wantAnnotations := map[string]string{"checksum/config": "bbb", "new": "n"}
	checkMeta := func(what string, p *corev1.Pod, labels, annotations map[string]string) {
		t.Helper()
		got := maps.Clone(p.Annotations)
		delete(got, StateAnnotation)
		if !maps.Equal(p.Labels, labels) || !maps.Equal(got, annotations) {
			t.Errorf("%s: labels %v, annotations %v; want %v and %v", what, p.Labels, got, labels, annotations)
		}
	}
	checkMeta("after the update's patch", updated, wantLabels, wantAnnotations)
	if updated.Spec.Containers[0].Image != "reg.example/app:v2" {
		t.Errorf("image %s after the update's patch, want v2 in the same write", updated.Spec.Containers[0].Image)
	}
	st := mustState(t, updated)
	if got := st.Annotations["gone"]; got != (LabelChange{Before: "y"}) {
		t.Errorf("state records annotation gone as %+v, want before y, after removed", got)
	}
	if got := st.Labels["added"]; got != (LabelChange{After: "z"}) {
		t.Errorf("state records label added as %+v, want before absent, after z", got)
	}

	// The update failed: the revert puts every key back as it was.
	st.moveTo(StageFailed, t0, "crash", FailureCrashLoop)
	updated.Annotations[StateAnnotation] = st.encode()
	r, err := NextRevert(updated, Options{}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	reverted := apply(t, updated, r)
	checkMeta("after the revert's patch", reverted, pod.Labels, pod.Annotations)
	if !revertPatched(reverted, mustState(t, reverted)) {
		t.Error("revertPatched is false after the revert's patch")
	}
}

// TestTargetMaySetNoStateAnnotation: a target naming the state annotation is refused.
func TestTargetMaySetNoStateAnnotation(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1", Annotations: map[string]string{StateAnnotation: "{}"}}
	if _, err := NextUpdate(testPod(), target, Options{}, t0); err == nil || !strings.Contains(err.Error(), StateAnnotation) {
		t.Errorf("NextUpdate = %v, want an error naming %s", err, StateAnnotation)
	}
}
