package inplace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

func TestUpdateChangesOnlyTheChangedContainer(t *testing.T) {
	ns := env.Namespace(t)
	before := newPod(t, ns, "p", false, "app", "sidecar", "logger")
	client, counter := countingClient(t, killPoint{})
	u := newUpdater(client, inplace.Options{})

	res := drive(t, "update", func() (inplace.Result, error) {
		return u.Update(context.Background(), ns, "p", inplace.Target{Images: map[string]string{"app": appV2, "sidecar": "registry.example/sidecar:v1"}, RolloutID: "r1"})
	})
	if res.Stage != inplace.StageUpdated {
		t.Fatalf("stage = %s (%s), want Updated", res.Stage, res.Reason)
	}
	after := getPod(t, ns, "p")
	if after.UID != before.UID || after.Status.PodIP != before.Status.PodIP || after.Spec.NodeName != before.Spec.NodeName {
		t.Errorf("pod identity changed: UID %s->%s IP %s->%s node %s->%s", before.UID, after.UID,
			before.Status.PodIP, after.Status.PodIP, before.Spec.NodeName, after.Spec.NodeName)
	}
	for _, name := range []string{"app", "sidecar", "logger"} {
		b, a := cluster.ContainerStatus(before, name), cluster.ContainerStatus(after, name)
		restarted := a.ContainerID != b.ContainerID
		if want := name == "app"; restarted != want || (want && a.RestartCount != b.RestartCount+1) {
			t.Errorf("container %s: restarted=%v (restarts %d -> %d), want restarted=%v", name, restarted, b.RestartCount, a.RestartCount, want)
		}
	}
	st := state(t, after)
	if len(st.Containers) != 1 || st.Containers[0].Name != "app" {
		t.Fatalf("state lists %+v, want only app", st.Containers)
	}
	c := st.Containers[0]
	app := cluster.ContainerStatus(after, "app")
	if c.BeforeImage != appV1 || c.BeforeImageID != cluster.ContainerStatus(before, "app").ImageID || app.ImageID == c.BeforeImageID {
		t.Errorf("state container = %+v; status imageID %s", c, app.ImageID)
	}
	// The image patch is the update's one write: its end is judged from the pod.
	if got := inplace.Judged(after, st, time.Now()); st.Stage != inplace.StageUpdating || got != inplace.StageUpdated {
		t.Errorf("state stage %s, judged %s; want Updating as written, judged Updated", st.Stage, got)
	}
	checkWrites(t, counter, ns, "p", "an update without a readiness gate", 1)
	if reasons := eventReasons(t, ns, "p"); !slices.Contains(reasons, inplace.EventUpdating) || slices.Contains(reasons, inplace.EventUpdated) {
		t.Errorf("events %v, want %s and no %s: the update's end is not written", reasons, inplace.EventUpdating, inplace.EventUpdated)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	ns := env.Namespace(t)
	newPod(t, ns, "ok", false, "app")

	never := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "never", Namespace: ns},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: appV1}}}}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "deleting", Namespace: ns, Finalizers: []string{"example.com/hold"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: appV1}}}}
	for _, p := range []*corev1.Pod{never, deleting} {
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, p.Name, 30*time.Second, "Ready", cluster.PodReady)
	}
	t.Cleanup(func() {
		_, _ = env.Client.CoreV1().Pods(ns).Patch(context.Background(), "deleting", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "deleting", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "deleting", 10*time.Second, "deletionTimestamp", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })

	tests := []struct {
		name, pod string
		images    map[string]string
		nonImage  bool
		want      string
	}{
		{name: "unknown container", pod: "ok", images: map[string]string{"db": appV2}, want: `no container named "db" (its containers: app`},
		{name: "invalid reference", pod: "ok", images: map[string]string{"app": "registry.example/app:v2 beta"}, want: "is not a valid reference"},
		{name: "non-image change", pod: "ok", nonImage: true, want: "spec.containers[0].env differs"},
		{name: "restartPolicy Never", pod: "never", images: map[string]string{"app": appV2}, want: "restartPolicy is Never"},
		{name: "being deleted", pod: "deleting", images: map[string]string{"app": appV2}, want: "being deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := getPod(t, ns, tt.pod)
			images := tt.images
			var err error
			if tt.nonImage {
				// A target template that changes more than images, as a workload would hand it over.
				desired := before.Spec.DeepCopy()
				desired.Containers[0].Image = appV2
				desired.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
				images, err = inplace.DiffSpecs(before.Spec, *desired, false)
			}
			if err == nil {
				u := newUpdater(env.Client, inplace.Options{})
				_, err = u.Update(context.Background(), ns, tt.pod, inplace.Target{Images: images, RolloutID: "r1"})
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
			if after := getPod(t, ns, tt.pod); after.ResourceVersion != before.ResourceVersion {
				t.Errorf("pod written: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
			}
		})
	}
}

func TestFailedUpdateRevertsToBeforeImage(t *testing.T) {
	tests := []struct {
		name, image, reason string
		// cause is what the reason must also say about why.
		cause string
	}{
		{"crash", "registry.example/app:crash-2", "CrashLoopBackOff", "last exit: Error, code 1"},
		{"pull", kubeletsim.NotFoundHost + "/app:v2", "ImagePullBackOff", kubeletsim.NotFoundHost + "/app:v2: not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			before := newPod(t, ns, "p", false, "app", "sidecar")
			beforeID := cluster.ContainerStatus(before, "app").ImageID
			u := newUpdater(env.Client, inplace.Options{})

			res := drive(t, "update", func() (inplace.Result, error) {
				return u.Update(context.Background(), ns, "p", inplace.Target{Images: map[string]string{"app": tt.image}, RolloutID: "r1"})
			})
			if res.Stage != inplace.StageFailed || !strings.HasPrefix(res.Reason, tt.reason) || !strings.Contains(res.Reason, tt.cause) {
				t.Fatalf("update ended %s (%s), want Failed with %s, saying %q", res.Stage, res.Reason, tt.reason, tt.cause)
			}
			if st := state(t, getPod(t, ns, "p")); st.Stage != inplace.StageFailed || !strings.HasPrefix(st.Reason, tt.reason) {
				t.Fatalf("state = %s (%s)", st.Stage, st.Reason)
			}

			res = drive(t, "revert", func() (inplace.Result, error) { return u.Revert(context.Background(), ns, "p") })
			if res.Stage != inplace.StageRolledBack {
				t.Fatalf("revert ended %s (%s), want RolledBack", res.Stage, res.Reason)
			}
			after := getPod(t, ns, "p")
			app := cluster.ContainerStatus(after, "app")
			if app.ImageID != beforeID || app.State.Running == nil || !cluster.PodReady(after) {
				t.Errorf("after revert: imageID %s (want %s), running %v, ready %v", app.ImageID, beforeID, app.State.Running != nil, cluster.PodReady(after))
			}
			if after.UID != before.UID || after.Status.PodIP != before.Status.PodIP {
				t.Errorf("pod identity changed")
			}
			if side := cluster.ContainerStatus(after, "sidecar"); side.ContainerID != cluster.ContainerStatus(before, "sidecar").ContainerID {
				t.Errorf("sidecar restarted")
			}
			reasons := eventReasons(t, ns, "p")
			for _, want := range []string{inplace.EventUpdating, inplace.EventUpdateFailed, inplace.EventRollingBack, inplace.EventRolledBack} {
				if !slices.Contains(reasons, want) {
					t.Errorf("events %v: missing %s", reasons, want)
				}
			}
		})
	}
}

func TestRevertAfterRetagGoesToRecordedDigest(t *testing.T) {
	tests := []struct {
		name    string
		retag   bool
		wantTag bool
	}{
		{"tag overwritten: revert to the digest", true, false},
		{"tag unchanged: revert to the tag", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			// Each subtest owns its tag, so retagging one does not affect the other.
			tag := "registry.example/" + ns + ":v1"
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: tag}}}}
			if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			before := env.WaitForPod(t, ns, "p", 30*time.Second, "Ready", cluster.PodReady)
			beforeID := cluster.ContainerStatus(before, "app").ImageID

			u := newUpdater(env.Client, inplace.Options{})
			u.TagMoved = simTagMoved
			drive(t, "update", func() (inplace.Result, error) {
				return u.Update(context.Background(), ns, "p", inplace.Target{Images: map[string]string{"app": appV2}, RolloutID: "r1"})
			})
			if tt.retag {
				if err := env.Sim.Retag(tag, kubeletsim.DigestFor(ns)); err != nil {
					t.Fatal(err)
				}
			}
			res := drive(t, "revert", func() (inplace.Result, error) { return u.Revert(context.Background(), ns, "p") })
			if res.Stage != inplace.StageRolledBack {
				t.Fatalf("revert ended %s (%s)", res.Stage, res.Reason)
			}
			after := getPod(t, ns, "p")
			wantImage := tag
			if !tt.wantTag {
				wantImage = "registry.example/" + ns + "@" + beforeID[strings.Index(beforeID, "@")+1:]
			}
			if got := after.Spec.Containers[0].Image; got != wantImage {
				t.Errorf("spec image after revert = %q, want %q", got, wantImage)
			}
			if got := cluster.ContainerStatus(after, "app").ImageID; got != beforeID {
				t.Errorf("imageID after revert = %q, want the recorded %q", got, beforeID)
			}
		})
	}
}

func TestReadinessGateKeepsPodUnreadyDuringUpdate(t *testing.T) {
	ns := env.Namespace(t)
	newPod(t, ns, "p", true, "app", "sidecar")
	client, counter := countingClient(t, killPoint{})
	u := newUpdater(client, inplace.Options{GracePeriod: time.Second})

	// Watch from the resourceVersion of a read made before the update starts, so every change
	// the update causes arrives as an event: polling could miss a short Ready blip.
	initial := getPod(t, ns, "p")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	windows, err := watchGateWindow(ctx, ns, "p", initial.ResourceVersion, cluster.ContainerStatus(initial, "app").ContainerID)
	if err != nil {
		t.Fatalf("watching pod %s/p: %v", ns, err)
	}
	res := drive(t, "update", func() (inplace.Result, error) {
		return u.Update(context.Background(), ns, "p", inplace.Target{Images: map[string]string{"app": appV2}, RolloutID: "r1"})
	})
	if res.Stage != inplace.StageUpdated {
		t.Fatalf("stage %s (%s)", res.Stage, res.Reason)
	}
	var win gateWindow
	select {
	case win = <-windows:
	case <-time.After(10 * time.Second):
		cancel()
		win = <-windows
	}
	if win.err != nil {
		t.Fatalf("watching pod %s/p: %v", ns, win.err)
	}
	if !win.gateFalse || !win.updated {
		t.Fatalf("the watch saw the gate go False: %v, then the state reach Updated: %v; want both", win.gateFalse, win.updated)
	}
	// Every write of the update shows, so a watch that skipped one is caught here.
	if want := []inplace.Stage{inplace.StageDraining, inplace.StageUpdating}; !slices.Equal(win.stages, want) {
		t.Errorf("stages seen between the gate going False and Updated: %v, want %v", win.stages, want)
	}
	if len(win.readyLeak) > 0 {
		t.Errorf("pod Ready while the gate was False, in %d of %d events: %v", len(win.readyLeak), win.events, win.readyLeak)
	}
	// The engine sets the gate True once the new container runs and is Ready, and counts the
	// pod Updated only once the kubelet has made it Ready after that.
	if win.openedEarly != "" {
		t.Errorf("the gate went True before the new container was Ready: %s", win.openedEarly)
	}
	if !win.readyAtUpdated {
		t.Errorf("the state reached Updated while the pod was not Ready")
	}
	env.WaitForPod(t, ns, "p", 10*time.Second, "Ready again", cluster.PodReady)
	checkWrites(t, counter, ns, "p", "an update with a readiness gate", 4)
}

// gateWindow is what a watch of a pod saw from the first event with the readiness gate False
// up to the first with the state at Updated.
type gateWindow struct {
	gateFalse, updated bool
	// openedEarly describes the app container when the gate first went True again, if it was
	// not a new container, running and Ready; readyAtUpdated is the pod's Ready at Updated.
	openedEarly    string
	gateOpened     bool
	readyAtUpdated bool
	// events counts the events in the window; stages lists the state stages they carried,
	// consecutive repeats dropped.
	events int
	stages []inplace.Stage
	// readyLeak describes each event in the window whose Ready condition was True while the
	// gate was not.
	readyLeak []string
	err       error
}

// watchGateWindow watches the pod from resourceVersion rv and sends what it saw once the state
// reaches Updated after the gate went False, the watch fails, or ctx ends. appBefore is the app
// container's containerID before the update. It runs off the test
// goroutine, so it reports through the result instead of t.
func watchGateWindow(ctx context.Context, ns, name, rv, appBefore string) (<-chan gateWindow, error) {
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		return env.Client.CoreV1().Pods(ns).Watch(ctx, opts)
	}}
	// A RetryWatcher resumes from the last resourceVersion it saw when the apiserver closes the
	// watch, so a reconnect loses no event.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		return nil, err
	}
	out := make(chan gateWindow, 1)
	go func() {
		defer w.Stop()
		var win gateWindow
		defer func() { out <- win }()
		for {
			var ev watch.Event
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					if ctx.Err() == nil {
						win.err = errors.New("watch closed")
					}
					return
				}
				ev = e
			}
			pod, ok := ev.Object.(*corev1.Pod)
			switch {
			case ev.Type == watch.Error:
				win.err = fmt.Errorf("watch error: %w", apierrors.FromObject(ev.Object))
			case ev.Type == watch.Deleted:
				win.err = errors.New("the pod was deleted")
			case !ok:
				win.err = fmt.Errorf("%s event carries a %T, not a pod", ev.Type, ev.Object)
			}
			if win.err != nil {
				return
			}
			if !win.gateFalse && !conditionIs(pod, inplace.ReadinessGate, corev1.ConditionFalse) {
				continue
			}
			win.gateFalse = true
			st, err := inplace.ReadState(pod)
			if err != nil {
				win.err = err
				return
			}
			if st != nil && st.Stage == inplace.StageUpdated {
				win.updated, win.readyAtUpdated = true, cluster.PodReady(pod)
				return
			}
			gateTrue := conditionIs(pod, inplace.ReadinessGate, corev1.ConditionTrue)
			if gateTrue && !win.gateOpened {
				win.gateOpened = true
				if app := cluster.ContainerStatus(pod, "app"); app == nil || app.ContainerID == appBefore || app.State.Running == nil || !app.Ready {
					win.openedEarly = fmt.Sprintf("resourceVersion %s: %+v", pod.ResourceVersion, app)
				}
			}
			stage := inplace.Stage("<no state>")
			if st != nil {
				stage = st.Stage
			}
			win.events++
			if n := len(win.stages); n == 0 || win.stages[n-1] != stage {
				win.stages = append(win.stages, stage)
			}
			if cluster.PodReady(pod) && !gateTrue {
				win.readyLeak = append(win.readyLeak, fmt.Sprintf("resourceVersion %s (stage %s)", pod.ResourceVersion, stage))
			}
		}
	}()
	return out, nil
}

func conditionIs(pod *corev1.Pod, t corev1.PodConditionType, status corev1.ConditionStatus) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == status
		}
	}
	return false
}

// TestKilledUpdaterResumes kills the updater at a random point and lets a fresh one finish, 200
// times. Half the updaters die between two steps, after a write landed; half mid-step, after
// reading the pod and deciding a write that never lands.
func TestKilledUpdaterResumes(t *testing.T) {
	const pods, iterations = 10, 20
	ns := env.Namespace(t)
	var (
		wg              sync.WaitGroup
		killed, midStep atomic.Int32
	)
	for p := range pods {
		name := "p" + string(rune('a'+p))
		gate := p%2 == 1
		newPod(t, ns, name, gate, "app", "sidecar")
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 42))
			for i := range iterations {
				// An update makes up to four writes (Draining, Updating, the gate True, Updated).
				var kill killPoint
				n := rng.IntN(4) + 1
				if rng.IntN(2) == 0 {
					kill.afterWrites = n
				} else {
					kill.atWrite = n
				}
				out := killAndResume(t, ns, name, i, kill)
				if out.died {
					killed.Add(1)
				}
				if out.midStep {
					midStep.Add(1)
				}
				if !out.ok {
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d updaters were killed before the update finished, %d of them mid-step", killed.Load(), pods*iterations, midStep.Load())
	if killed.Load() == 0 {
		t.Error("no updater was killed: the test exercised nothing")
	}
	if midStep.Load() == 0 {
		t.Error("no updater died mid-step: a read without its write was never exercised")
	}
}

// killOutcome is how one killAndResume went.
type killOutcome struct {
	// ok: every check passed.
	ok bool
	// died: the first updater died before the update finished; midStep: it died with a write
	// decided and unsent.
	died, midStep bool
}

// killAndResume runs one update of the pod's app container to a new image, killing the first
// updater at kill, and checks that a fresh updater finishes it. It runs off the test goroutine,
// so it reports with t.Errorf and returns rather than calling t.Fatal.
func killAndResume(t *testing.T, ns, name string, i int, kill killPoint) (out killOutcome) {
	fail := func(format string, args ...any) killOutcome {
		t.Errorf("%s iteration %d (killed at %+v): "+format, append([]any{name, i, kill}, args...)...)
		return out
	}
	before, err := readPod(ns, name)
	if err != nil {
		return fail("%v", err)
	}
	appBefore, sideBefore := cluster.ContainerStatus(before, "app"), cluster.ContainerStatus(before, "sidecar")
	if appBefore == nil || sideBefore == nil {
		return fail("container statuses before the update: %v", before.Status.ContainerStatuses)
	}
	app, side := *appBefore, *sideBefore
	target := inplace.Target{
		Images:    map[string]string{"app": "registry.example/app:v" + string(rune('b'+i%20)) + "-" + name},
		RolloutID: "r" + string(rune('a'+i)),
	}
	opts := inplace.Options{}

	dying, counter, err := newCountingClient(kill)
	if err != nil {
		return fail("%v", err)
	}
	u := newUpdater(dying, opts)
	for range 200 {
		res, err := u.Update(context.Background(), ns, name, target)
		if errors.Is(err, errKilled) {
			out.died = true
		}
		if err != nil || res.Done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lost := counter.lost(); lost != nil {
		out.midStep = true
		// Only updaters write the state annotation, so if the lost write had landed the pod
		// would carry the state it sent: check the kill really came before the write.
		var patch struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(lost, &patch); err != nil {
			return fail("decoding the lost write %s: %v", lost, err)
		}
		sent := patch.Metadata.Annotations[inplace.StateAnnotation]
		if sent == nil {
			return fail("the lost write carries no state: %s", lost)
		}
		pod, err := readPod(ns, name)
		if err != nil {
			return fail("%v", err)
		}
		if pod.Annotations[inplace.StateAnnotation] == *sent {
			return fail("the write that should have been lost landed: state %s", *sent)
		}
	}

	fresh := newUpdater(env.Client, opts)
	var res inplace.Result
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if res, err = fresh.Update(context.Background(), ns, name, target); err != nil {
			return fail("resumed update: %v", err)
		}
		if res.Done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	after, err := readPod(ns, name)
	if err != nil {
		return fail("%v", err)
	}
	st, _ := inplace.ReadState(after)
	a, s := cluster.ContainerStatus(after, "app"), cluster.ContainerStatus(after, "sidecar")
	switch {
	case !res.Done || res.Stage != inplace.StageUpdated:
		return fail("ended %s (%s)", res.Stage, res.Reason)
	case st == nil || len(st.Containers) != 1 || st.Containers[0].BeforeImage != before.Spec.Containers[0].Image:
		return fail("state %+v, want BeforeImage %s", st, before.Spec.Containers[0].Image)
	case a == nil || s == nil:
		return fail("container statuses after the update: %v", after.Status.ContainerStatuses)
	case a.RestartCount != app.RestartCount+1:
		return fail("app restarted %d times, want once", a.RestartCount-app.RestartCount)
	case s.ContainerID != side.ContainerID:
		return fail("sidecar restarted")
	case inplace.Judged(after, st, time.Now()) != inplace.StageUpdated || a.ImageID == st.Containers[0].BeforeImageID:
		// Without a readiness gate the update's end is judged from the pod, never written.
		return fail("judged %s, state %+v, status imageID %s", inplace.Judged(after, st, time.Now()), st, a.ImageID)
	}
	out.ok = true
	return out
}

func TestPreexistingCrashLoopIsNotBlamedOnTheNewImage(t *testing.T) {
	tests := []struct {
		name, image string
		stage       inplace.Stage
		reason      string
	}{
		{"fixed by the new image", appV2, inplace.StageUpdated, ""},
		// Reported, not blamed: the update completes, the failure recorded as its reason.
		{"new image crashes too", "registry.example/app:crash-again", inplace.StageUpdated, "it was already in CrashLoopBackOff before the update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:crash-1"}}}}
			if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			env.WaitForPod(t, ns, "p", 30*time.Second, "CrashLoopBackOff", func(p *corev1.Pod) bool {
				cs := cluster.ContainerStatus(p, "app")
				return p.Status.Phase == corev1.PodRunning && cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
			})
			u := newUpdater(env.Client, inplace.Options{})
			res := drive(t, "update", func() (inplace.Result, error) {
				return u.Update(context.Background(), ns, "p", inplace.Target{Images: map[string]string{"app": tt.image}, RolloutID: "r1"})
			})
			if res.Stage != tt.stage || !strings.Contains(res.Reason, tt.reason) {
				t.Fatalf("ended %s (%s), want %s with %q", res.Stage, res.Reason, tt.stage, tt.reason)
			}
			if st := state(t, getPod(t, ns, "p")); st.Containers[0].FailingBefore != "CrashLoopBackOff" {
				t.Errorf("failingBefore = %q, want CrashLoopBackOff", st.Containers[0].FailingBefore)
			}
		})
	}
}

// TestBackAndForthWaitsOutTheKubeletsBackOff rolls one pod v1 -> v2 -> v3 -> v2 -> v3. The
// kubelet's crash back-off is keyed by image and counts in-place starts, so going back to an image
// the container ran moments ago shows CrashLoopBackOff on the replaced container before the image
// starts at all: each update waits it out and completes, one restart each.
func TestBackAndForthWaitsOutTheKubeletsBackOff(t *testing.T) {
	ns := env.Namespace(t)
	before := newPod(t, ns, "p", false, "app")
	restarts := cluster.ContainerStatus(before, "app").RestartCount
	u := newUpdater(env.Client, inplace.Options{})
	backOffs := 0
	for i, img := range []string{appV2, "registry.example/app:v3", appV2, "registry.example/app:v3"} {
		target := inplace.Target{Images: map[string]string{"app": img}, RolloutID: fmt.Sprintf("r%d", i)}
		sawBackOff := false
		res := drive(t, "update to "+img, func() (inplace.Result, error) {
			res, err := u.Update(context.Background(), ns, "p", target)
			if cs := cluster.ContainerStatus(getPod(t, ns, "p"), "app"); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				sawBackOff = true
			}
			return res, err
		})
		if res.Stage != inplace.StageUpdated {
			t.Fatalf("update %d to %s ended %s (%s), want Updated", i, img, res.Stage, res.Reason)
		}
		if sawBackOff {
			backOffs++
		}
		pod := getPod(t, ns, "p")
		app := cluster.ContainerStatus(pod, "app")
		if restarts++; app.RestartCount != restarts || app.State.Running == nil || !app.Ready || !cluster.PodReady(pod) {
			t.Fatalf("after update %d to %s: restarts %d (want %d), running %v, ready %v, pod Ready %v",
				i, img, app.RestartCount, restarts, app.State.Running != nil, app.Ready, cluster.PodReady(pod))
		}
	}
	if backOffs == 0 {
		t.Error("no update saw the kubelet's back-off: the test exercised nothing")
	}
	t.Logf("%d of the updates waited out a CrashLoopBackOff", backOffs)
}
