package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// exitAPIUnavailable is the command's exit code when the API server kept failing past its
// error budget: the rollout is left resumable, and a user runs the same command again.
const exitAPIUnavailable = 6

// slowRunArgs is runArgs with a soak between batches, which leaves the faults time to land
// while the rollout is under way.
func slowRunArgs(ns string) []string {
	return append(runArgs(ns), "--soak", "2s")
}

// command is the CLI running in the background.
type command struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

// startCommand starts the CLI with args in the background.
func startCommand(t *testing.T, args []string) *command {
	t.Helper()
	c := &command{done: make(chan struct{})}
	c.cmd = clitest.Start(t, env, cli, &c.stderr, args...)
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	return c
}

// running reports whether the command has not exited yet.
func (c *command) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// finish waits for the command and, as a user would, runs it again while it exits saying the
// API server kept failing (three times at most), until it exits otherwise; it fails the test
// unless that exit is 0.
// It returns how many times the command was run again.
func (c *command) finish(t *testing.T, args []string) (reruns int) {
	t.Helper()
	<-c.done
	code, stderr := c.cmd.ProcessState.ExitCode(), c.stderr.String()
	// The control plane is back well within a few error budgets.
	for code == exitAPIUnavailable && reruns < 3 {
		t.Logf("%s exited %d, the API server unavailable; running it again:\n%s", args[0], code, clitest.LastLines(stderr, 3))
		reruns++
		r := clitest.Run(t, env, cli, args...)
		code, stderr = r.Code, r.Stderr
	}
	if code != 0 {
		t.Fatalf("%s exited %d:\n%s", strings.Join(args, " "), code, clitest.LastLines(stderr, 20))
	}
	return reruns
}

// waitUpdated waits until at least n pods are Updated, or the rollout is no longer under way;
// it fails the test in that case, naming what the fault would have missed.
func waitUpdated(t *testing.T, ns string, n int, fault string) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d pods of %s/%s updated", n, ns, name), func(context.Context) (bool, error) {
		kp := observe(t, ns)
		return kp.stages[string(inplace.StageUpdated)] >= n || over(kp), nil
	})
	if kp := observe(t, ns); kp.phase != rollout.PhaseProgressing {
		t.Fatalf("the rollout was over before %s (lock %s, pods%s): the test proves nothing", fault, kp.phase, counts(kp.stages))
	}
}

// over reports whether the rollout kp observed has ended: its lock is there and no longer
// Progressing (none yet means it has not begun).
func over(kp killPoint) bool {
	return kp.phase != "none" && kp.phase != rollout.PhaseProgressing
}

// TestControlPlaneRestartedMidRollout restarts kube-apiserver, then etcd, each on its ports and
// with its data, during a CLI rollout of a 30-pod StatefulSet; the command rides the outage out
// (or, exiting because the API server stayed unavailable, is run again as a user would) and
// the rollout finishes with the invariants holding. It stops the control plane: not parallel.
func TestControlPlaneRestartedMidRollout(t *testing.T) {
	rng, maxDelay := faultSettings(t, "control plane")
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	args := slowRunArgs(ns)
	c := startCommand(t, args)
	faults := []struct {
		name    string
		restart func(grace time.Duration) error
		// after is how many pods are Updated before the restart.
		after int
	}{
		{"kube-apiserver", env.RestartAPIServer, 1},
		{"etcd", env.RestartEtcd, 3},
	}
	for _, f := range faults {
		waitUpdated(t, ns, f.after, "the restart of "+f.name)
		delay := randomDelay(rng, maxDelay/4)
		time.Sleep(delay)
		if !c.running() {
			t.Fatalf("the command exited before the restart of %s: the test proves nothing", f.name)
		}
		kp := observe(t, ns)
		began := time.Now()
		if err := f.restart(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restarted in %s, %s into the batch: lock %s, pods%s", f.name, time.Since(began).Round(time.Millisecond), delay.Round(time.Millisecond), kp.phase, counts(kp.stages))
	}
	if reruns := c.finish(t, args); reruns > 0 {
		t.Logf("the command was run %d more times", reruns)
	}
	check(t, ns, orig, before, direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded})
}

// labeller keeps writing a label on the pods of the StatefulSet, one after another every 10 ms,
// and an annotation on the StatefulSet itself every 200 ms, as other controllers would, so that
// the writes of ours that carry the resourceVersion they read meet conflicts. Much faster than
// that, on a loaded machine, a read-modify-write of the StatefulSet never lands between two of
// its writes and the rollout cannot finalize: optimistic concurrency has no answer to a writer
// that never pauses. It stops when the test ends or stop is called, letting the write in flight
// end rather than cancel it.
func labeller(t *testing.T, ns string) (stop func() (writes int)) {
	t.Helper()
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		stopped atomic.Bool
		writes  atomic.Int64
	)
	wrote := func(err error) {
		if err == nil {
			writes.Add(1)
		}
	}
	wg.Go(func() {
		for i := 0; !stopped.Load(); i++ {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.inplace-rollout.io/labeller":"%d"}}}`, i)
			_, err := env.Client.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			wrote(err)
			time.Sleep(200 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for i := 0; !stopped.Load(); i++ {
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"test.inplace-rollout.io/labeller":"%d"}}}`, i)
			for ordinal := range replicas {
				if stopped.Load() {
					break
				}
				pod := fmt.Sprintf("%s-%d", name, ordinal)
				_, err := env.Client.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
				wrote(err)
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	var once sync.Once
	stop = func() int {
		once.Do(func() { stopped.Store(true); wg.Wait() })
		return int(writes.Load())
	}
	t.Cleanup(func() { stop() })
	return stop
}

// conflicts is the number of writes of pods (not their status) and of StatefulSets the API
// server has answered 409 Conflict, by resource, from its metrics. In the labeller's test they
// are ours: the labeller's patches and the kubelet simulator's status patches name no
// resourceVersion and never conflict.
func conflicts(t *testing.T) map[string]int {
	t.Helper()
	body, err := env.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `code="409"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		for _, resource := range []string{"pods", "statefulsets"} {
			if !strings.Contains(line, `resource="`+resource+`"`) {
				continue
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("apiserver metrics: %q: %v", line, err)
			}
			out[resource] += int(v)
		}
	}
	return out
}

// TestConcurrentLabellerMeetsEveryWrite runs a CLI rollout of a 30-pod StatefulSet, then its
// rollback, while a labeller writes the pods and the StatefulSet all along: the engine's writes
// meet conflicts, read again and go on, and the invariants hold in both directions. It counts
// the API server's conflicts, whoever met them: not parallel.
func TestConcurrentLabellerMeetsEveryWrite(t *testing.T) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	stop := labeller(t, ns)
	conflictsBefore := conflicts(t)
	for _, args := range [][]string{runArgs(ns), rollbackArgs(ns)} {
		if r := clitest.Run(t, env, cli, args...); r.Code != 0 {
			t.Fatalf("%s with the labeller: %s", args[0], r)
		}
	}
	writes := stop()
	after := conflicts(t)
	pods, sts := after["pods"]-conflictsBefore["pods"], after["statefulsets"]-conflictsBefore["statefulsets"]
	t.Logf("labeller: %d writes; our writes met %d conflicts on pods, %d on the StatefulSet", writes, pods, sts)
	if pods+sts == 0 {
		t.Error("no write met a conflict: the labeller exercised nothing")
	}
	check(t, ns, orig, before, direction{template: clitest.AppV1, restarts: 2, phase: rollout.PhaseRolledBack, back: true})
}

// TestWorkloadChangedMidRollout changes the StatefulSet under a CLI rollout: a pod deleted while
// it is being updated (the StatefulSet controller creates it again, on the template; it is the
// controller's new pod, not ours, and must end on the new image), and the StatefulSet scaled
// up or down once the first batches are in. The rollout finishes and every pod, old or new,
// runs the new image.
func TestWorkloadChangedMidRollout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// change changes the workload mid-rollout and returns the pods the controller recreated
		// and the replica count at the end (0: unchanged).
		change func(t *testing.T, ns string) (recreated map[string]bool, replicas int)
	}{
		{"a pod deleted mid-batch", func(t *testing.T, ns string) (map[string]bool, int) {
			pod := podInStage(t, ns, inplace.StageUpdating)
			if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatalf("deleting pod %s/%s: %v", ns, pod, err)
			}
			t.Logf("deleted pod %s while it was %s", pod, inplace.StageUpdating)
			return map[string]bool{pod: true}, 0
		}},
		{"scaled up", func(t *testing.T, ns string) (map[string]bool, int) {
			waitUpdated(t, ns, 3, "the scale-up")
			scale(t, ns, replicas+4)
			return nil, replicas + 4
		}},
		{"scaled down", func(t *testing.T, ns string) (map[string]bool, int) {
			waitUpdated(t, ns, 3, "the scale-down")
			scale(t, ns, replicas-4)
			return nil, replicas - 4
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
			before := snapshot(t, ns)
			args := slowRunArgs(ns)
			c := startCommand(t, args)
			recreated, n := tt.change(t, ns)
			if !c.running() {
				t.Fatal("the command exited before the change: the test proves nothing")
			}
			c.finish(t, args)
			if n != 0 {
				clitest.WaitStatefulSet(t, env, ns, name, fmt.Sprintf("%d replicas ready", n), func(s *appsv1.StatefulSet) bool {
					return s.Status.ObservedGeneration == s.Generation && s.Status.Replicas == int32(n) && s.Status.ReadyReplicas == int32(n)
				})
			}
			for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
				b, existed := before[p.Name]
				if existed && !recreated[p.Name] {
					continue
				}
				if existed && b.uid == string(p.UID) {
					t.Errorf("pod %s: UID %s as before its deletion: the test deleted nothing", p.Name, p.UID)
				}
				stage := "none"
				if st, err := inplace.ReadState(&p); err == nil && st != nil {
					stage = string(inplace.Judged(&p, st, time.Now()))
				}
				var restarts int32
				if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
					restarts = cs.RestartCount
				}
				t.Logf("pod %s, the controller's (UID %s): state %s, app restarted %d times, on %s", p.Name, p.UID, stage, restarts, p.Spec.Containers[0].Image)
			}
			want := direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded, recreated: recreated, replicas: n}
			if check(t, ns, orig, before, want) == 0 {
				changeCaught(t, ns, orig, before, want)
			}
		})
	}
}

// changeCaught proves that the invariants see the change the test made: expected as if the
// workload had not changed, the pods the controller created must be reported.
func changeCaught(t *testing.T, ns string, orig *appsv1.StatefulSet, before map[string]podBefore, want direction) {
	t.Helper()
	for pod := range want.recreated {
		w := want
		w.recreated = nil
		if found := violations(t, ns, orig, before, w); !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, "pod "+pod+": recreated") }) {
			t.Errorf("the invariant check misses the deleted pod %s: got %q", pod, found)
		}
	}
	if want.replicas != 0 {
		w := want
		w.replicas = 0
		if found := violations(t, ns, orig, before, w); !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, "pods after the scenario") }) {
			t.Errorf("the invariant check misses the scaling to %d replicas: got %q", want.replicas, found)
		}
	}
	if len(want.recreated) == 0 && want.replicas <= len(before) {
		return // the controller created no pod
	}
	// A pod created on another object's behalf is not one the StatefulSet controller may create.
	o := orig.DeepCopy()
	o.UID = "other"
	if found := violations(t, ns, o, before, want); !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, "want StatefulSet "+name) }) {
		t.Errorf("the invariant check misses a controller pod owned by another object: got %q", found)
	}
}

// podInStage polls the pods until one is in stage, as inplace.Judged, and returns its name.
func podInStage(t *testing.T, ns string, stage inplace.Stage) string {
	t.Helper()
	var found string
	cluster.WaitFor(t, 2*time.Minute, fmt.Sprintf("a pod of %s/%s %s", ns, name, stage), func(context.Context) (bool, error) {
		for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
			if st, err := inplace.ReadState(&p); err == nil && st != nil && inplace.Judged(&p, st, time.Now()) == stage {
				found = p.Name
				return true, nil
			}
		}
		if kp := observe(t, ns); kp.phase != rollout.PhaseProgressing && kp.phase != "none" {
			t.Fatalf("the rollout was over before a pod was seen %s (lock %s, pods%s): the test proves nothing", stage, kp.phase, counts(kp.stages))
		}
		return false, nil
	})
	return found
}

// scale sets the StatefulSet's replicas.
func scale(t *testing.T, ns string, n int) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
	if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("scaling statefulset %s/%s to %d: %v", ns, name, n, err)
	}
	t.Logf("scaled statefulset %s to %d replicas", name, n)
}
