package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// slowV2 takes 10 s to become ready, in place and in a new pod alike.
const slowV2 = "registry.example/app:slow-v2"

// TestDeletedPodCountsAgainstMaxUnavailable deletes a pod the rollout has not reached once the
// first batch is done: the StatefulSet controller recreates it from the new template, and it takes
// 10 s to become Ready. It must not count as updated while it is not Ready, and the rollout must
// not start another pod while it is down: with --max-unavailable 1, whenever the rollout starts
// a pod, every other pod is there and Ready. The first run holds after the first batch (--up-to
// 1), so the pod is deleted, and recreated, before the next batch can start, whatever the pace of
// the machine: the run that goes on finds it there and not Ready.
func TestDeletedPodCountsAgainstMaxUnavailable(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	w := watchStarts(t, ns, "app=web", 3)
	args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + slowV2,
		"--batches", "1,100%", "--max-unavailable", "1", "--soak", "3s", "--timeout", "2m"}
	if r := runCLI(t, append(args, "--up-to", "1")...); r.Code != 0 {
		t.Fatalf("run --up-to 1: %s", r)
	}
	old := listPodsByName(t, ns, "app=web")
	for name, want := range map[string]bool{"web-2": true, "web-1": false, "web-0": false} {
		p := old[name]
		if st := stateOf(t, &p); (st != nil) != want {
			t.Fatalf("after the first batch, pod %s has state %+v; want web-2 alone updated", name, st)
		}
	}
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "web-0", 60*time.Second, "recreated", func(p *corev1.Pod) bool { return p.UID != old["web-0"].UID })

	if r := runCLI(t, args...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	starts, violations := w.stop()
	for _, v := range violations {
		t.Error(v)
	}
	if starts < 2 {
		t.Errorf("saw %d pods start updating, want web-2 and, after the deletion, web-1", starts)
	}
	podsOnImage(t, ns, "app=web", slowV2)
}

// TestScaleUpDuringTheSoakGetsAFullSoak scales the StatefulSet up while its first batch soaks:
// the new pod, created from the new template, completes the second batch, whose soak then runs
// in full from when that pod became Ready, not only what was left of the first batch's.
func TestScaleUpDuringTheSoakGetsAFullSoak(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	const soak = 20 * time.Second
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2,
		"--batches", "1,2,100%", "--soak", soak.String(), "--timeout", "2m")
	env.WaitForPod(t, ns, "web-2", 60*time.Second, "Updated", func(p *corev1.Pod) bool {
		st, _ := inplace.ReadState(p)
		return st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
	})
	// Halfway through the first soak, so that the second batch completes well after it began.
	time.Sleep(soak / 2)
	if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), "web", types.MergePatchType,
		[]byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 3*time.Minute); code != 0 {
		t.Fatalf("run exited %d, want 0:\n%s", code, clitest.LastLines(stderr.String(), 20))
	}
	web3, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "web-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var readyAt time.Time
	for _, c := range web3.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			readyAt = c.LastTransitionTime.Time
		}
	}
	web1, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := stateOf(t, web1)
	if st == nil || readyAt.IsZero() {
		t.Fatalf("web-1 state %+v, web-3 Ready at %v: want both", st, readyAt)
	}
	// The Ready condition keeps whole seconds, so allow one.
	if earliest := readyAt.Add(soak - time.Second); st.StartedAt.Before(earliest) {
		t.Errorf("web-1 (batch 3) started at %s, %s after web-3 completed batch 2 at %s; want a full soak of %s",
			st.StartedAt.Format(time.RFC3339Nano), st.StartedAt.Sub(readyAt).Round(100*time.Millisecond), readyAt.Format(time.RFC3339), soak)
	}
}

// startWatch records, each time a pod enters its update (stage Draining or Updating), how many
// of the other pods were not there or not Ready, and reports more than none as a violation of
// --max-unavailable 1.
type startWatch struct {
	mu         sync.Mutex
	pods       map[string]*corev1.Pod
	seen       map[string]bool // pod UID + rollout: its start was checked
	starts     int
	violations []string
	cancel     context.CancelFunc
	done       chan struct{}
}

func watchStarts(t *testing.T, ns, selector string, replicas int) *startWatch {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &startWatch{pods: map[string]*corev1.Pod{}, seen: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	for i := range list.Items {
		w.pods[list.Items[i].Name] = &list.Items[i]
	}
	go func() {
		defer close(w.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(w.pods, p.Name)
			} else {
				w.pods[p.Name] = p
				w.check(p, replicas)
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *startWatch) check(p *corev1.Pod, replicas int) {
	st, _ := inplace.ReadState(p)
	if st == nil || (st.Stage != inplace.StageDraining && st.Stage != inplace.StageUpdating) {
		return
	}
	key := string(p.UID) + "/" + st.RolloutID
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	w.starts++
	var down []string
	for name, o := range w.pods {
		if name == p.Name {
			continue
		}
		switch {
		case o.DeletionTimestamp != nil:
			down = append(down, name+" (being deleted)")
		case !cluster.PodReady(o):
			down = append(down, name+" (not Ready)")
		}
	}
	if missing := replicas - len(w.pods); missing > 0 {
		down = append(down, fmt.Sprintf("%d pods missing", missing))
	}
	if len(down) > 0 {
		w.violations = append(w.violations, fmt.Sprintf("pod %s started updating while %v were down: more than --max-unavailable 1", p.Name, down))
	}
}

// stop ends the watch and returns how many starts it saw and the violations.
func (w *startWatch) stop() (int, []string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts, w.violations
}
