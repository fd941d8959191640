package customrun

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonfake "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/internal/keyqueue"
	"github.com/inplace-rollout/inplace-rollout/internal/orphan"
	"github.com/inplace-rollout/inplace-rollout/internal/syncbuf"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// waitFor bounds every wait of these tests for the controller to act.
const waitFor = 20 * time.Second

// running is a controller watching tekton, with the kube client kube, reconciling until stop.
type running struct {
	c    *Controller
	logs *syncbuf.Buffer
	// stop cancels the controller's context and waits for Reconcile to return.
	stop func()
}

// startController builds a controller on the fake clients, lists the runs and reconciles them
// in the background until the test ends.
func startController(t *testing.T, tekton *tektonfake.Clientset, kube *kubefake.Clientset) *running {
	t.Helper()
	logs := &syncbuf.Buffer{}
	e := &rollout.Engine{Client: kube}
	c := New(tekton, e, specs{}, Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	if c.Synced() {
		t.Error("Synced before Watch")
	}
	if err := c.Watch(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	if !c.Synced() {
		t.Error("not Synced after Watch")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Reconcile(ctx)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Errorf("Reconcile still runs %s after its context ended", waitFor)
		}
	})
	t.Cleanup(stop)
	return &running{c: c, logs: logs, stop: stop}
}

// waitUntil polls cond until it holds, failing the test after waitFor.
func waitUntil(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// storedRun reads run ns/name from the fake.
func storedRun(tekton *tektonfake.Clientset, ns, name string) (*v1beta1.CustomRun, error) {
	return tekton.TektonV1beta1().CustomRuns(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// TestControllerReconcilesRuns: a run added is taken through its steps by the workers, each
// write of the run bringing it back through the informer: held by the finalizer, started, failed
// (its StatefulSet does not exist), and let go. A step that fails with an error worth a retry is
// retried with the queue's backoff, each retry at least twice as late as the one before, and
// logged with the run and its workload.
func TestControllerReconcilesRuns(t *testing.T) {
	tests := []struct {
		name string
		// fails is how many reads of the StatefulSet fail with an error worth a retry.
		fails int
	}{
		{"every step succeeds", 0},
		{"steps fail, then succeed", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tekton := tektonfake.NewSimpleClientset()
			kube := kubefake.NewClientset()
			var (
				mu    sync.Mutex
				reads []time.Time
			)
			kube.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				reads = append(reads, time.Now())
				if len(reads) <= tt.fails {
					return true, nil, apierrors.NewServiceUnavailable("etcd is starting")
				}
				return false, nil, nil
			})
			r := startController(t, tekton, kube)
			run := embedded(target, arr("images", "app=registry.example/app:v2"))
			if _, err := tekton.TektonV1beta1().CustomRuns("ns").Create(context.Background(), run, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}

			var got *v1beta1.CustomRun
			waitUntil(t, "the run done and let go", func() (bool, error) {
				var err error
				got, err = storedRun(tekton, "ns", run.Name)
				return err == nil && got.IsDone() && !slices.Contains(got.Finalizers, Finalizer), err
			})
			r.stop()

			if c := got.Status.GetCondition(apis.ConditionSucceeded); c == nil || c.Reason != ReasonRefused || !strings.Contains(c.Message, "not found") {
				t.Errorf("condition %+v, want failed %s: the StatefulSet is not found", c, ReasonRefused)
			}
			if got.Status.StartTime == nil {
				t.Error("the run was never started")
			}
			retried := logLinesOf(r.logs.String(), "level=WARN", "step failed, retrying", "customrun=ns/pr-rollout", "workload=StatefulSet/web")
			if len(retried) != tt.fails {
				t.Errorf("%d retries logged, want %d:\n%s", len(retried), tt.fails, r.logs.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reads) != tt.fails+1 {
				t.Fatalf("%d reads of the StatefulSet, want %d", len(reads), tt.fails+1)
			}
			for i := 1; i < len(reads); i++ {
				if gap, least := reads[i].Sub(reads[i-1]), keyqueue.FirstBackoff<<(i-1); gap < least {
					t.Errorf("retry %d came %s after the failure, want at least %s", i, gap, least)
				}
			}
			if n := r.c.loop.Queue.NumRequeues("ns/" + run.Name); n != 0 {
				t.Errorf("the queue still counts %d failures of the run: a success forgets them", n)
			}
		})
	}
}

// TestControllerNextDropsWhatIsNotARun: a key that names no run, or is no key, is dropped
// without a retry.
func TestControllerNextDropsWhatIsNotARun(t *testing.T) {
	for _, key := range []string{"ns/gone", "a/b/c"} {
		t.Run(key, func(t *testing.T) {
			c := New(tektonfake.NewSimpleClientset(), &rollout.Engine{Client: kubefake.NewClientset()}, specs{}, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			t.Cleanup(c.loop.Queue.ShutDown)
			if err := c.Watch(ctx); err != nil {
				t.Fatal(err)
			}
			c.loop.Queue.Add(key)
			if !c.loop.Next(ctx) {
				t.Fatal("next reports the queue shut down")
			}
			if n, l := c.loop.Queue.NumRequeues(key), c.loop.Queue.Len(); n != 0 || l != 0 {
				t.Errorf("after next: %d requeues of %s, %d keys queued; want none", n, key, l)
			}
		})
	}
}

// TestControllerScansWhenARunIsDeleted: a run of ours deleted without its finalizer (force
// deleted) leaves its workload held for nobody; its deletion has the scan find the lock after
// the settle time, long before the periodic scan.
func TestControllerScansWhenARunIsDeleted(t *testing.T) {
	run := customRun("ns", "gone", "u1")
	run.Status.MarkCustomRunFailed("Failed", "done")
	tekton := tektonfake.NewSimpleClientset(run)
	// The watch is there before the test deletes the run: the fake sends no event to a watch
	// made after it.
	watching := make(chan struct{})
	tekton.PrependWatchReactor("customruns", func(k8stesting.Action) (bool, watch.Interface, error) {
		select {
		case <-watching:
		default:
			close(watching)
		}
		return false, nil, nil
	})
	kube := kubefake.NewClientset(lockedStatefulSet(t, "ns", "web", "tekton:ns/gone", "u1"))
	// The scan at start fails, and says so: once it did, the next scan is the deletion's.
	lists := 0
	kube.PrependReactor("list", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if lists++; lists == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is starting")
		}
		return false, nil, nil
	})
	r := startController(t, tekton, kube)
	<-watching
	waitUntil(t, "the scan at start", func() (bool, error) {
		return strings.Contains(r.logs.String(), "listing the workloads held for CustomRuns"), nil
	})

	deleted := time.Now()
	if err := tekton.TektonV1beta1().CustomRuns("ns").Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	waitUntil(t, "the rollback of the deleted run's rollout", func() (bool, error) {
		lock, err := rollout.ReadRecord(context.Background(), kube, ref)
		return err == nil && lock.Phase == rollout.PhaseRollingBack, err
	})
	if took := time.Since(deleted); took < orphan.Settle || took >= resync {
		t.Errorf("rolled back %s after the deletion, want after the settle time %s and before the periodic scan %s", took, orphan.Settle, resync)
	}
	r.stop()
	if lines := logLinesOf(r.logs.String(), "level=WARN", "rolling back the rollout of a deleted CustomRun", "holder=tekton:ns/gone"); len(lines) != 1 {
		t.Errorf("rollback logged %d times, want once:\n%s", len(lines), r.logs.String())
	}
}

// TestRunDeletedAsksForOneScan: the deletion of a run of ours, seen or missed by the watch (a
// tombstone), asks for a scan, and requests while one is due make no second; a run of another
// kind asks for none.
func TestRunDeletedAsksForOneScan(t *testing.T) {
	other := customRun("ns", "other", "u2")
	other.Spec.CustomSpec.Kind = "Other"
	tests := []struct {
		name    string
		deleted []any
		want    int
	}{
		{"a run of ours", []any{customRun("ns", "gone", "u1")}, 1},
		{"a tombstone of ours", []any{cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: customRun("ns", "gone", "u1")}}, 1},
		{"two runs of ours", []any{customRun("ns", "a", "u1"), customRun("ns", "b", "u3")}, 1},
		{"a run of another kind", []any{other}, 0},
		{"not a run", []any{cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "x"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tektonfake.NewSimpleClientset(), &rollout.Engine{Client: kubefake.NewClientset()}, specs{}, Options{})
			for _, obj := range tt.deleted {
				c.runDeleted(obj)
			}
			if got := c.orphans.Pending(); got != tt.want {
				t.Errorf("%d scans asked for, want %d", got, tt.want)
			}
		})
	}
}

// TestControllerStops: Watch gives up when its context ends before the runs are listed, and
// Reconcile returns once its context ends, its queues shut down.
func TestControllerStops(t *testing.T) {
	t.Run("watch", func(t *testing.T) {
		tekton := tektonfake.NewSimpleClientset()
		tekton.PrependReactor("list", "customruns", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd is starting")
		})
		c := New(tekton, &rollout.Engine{Client: kubefake.NewClientset()}, specs{}, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		t.Cleanup(cancel)
		err := c.Watch(ctx)
		if err == nil || !strings.Contains(err.Error(), "listing CustomRuns") || c.Synced() {
			t.Errorf("Watch = %v, Synced %v; want an error listing CustomRuns, not synced", err, c.Synced())
		}
	})
	t.Run("reconcile", func(t *testing.T) {
		r := startController(t, tektonfake.NewSimpleClientset(), kubefake.NewClientset())
		r.stop()
		if !r.c.loop.Queue.ShuttingDown() || !r.c.orphans.ShuttingDown() {
			t.Error("the queues go on after Reconcile returned")
		}
		if lines := logLinesOf(r.logs.String(), "reconciling CustomRuns", "workers=4"); len(lines) != 1 {
			t.Errorf("start logged %d times, want once with the workers:\n%s", len(lines), r.logs.String())
		}
	})
}

// lockedStatefulSet is StatefulSet ns/name (as statefulSet makes web) held for holder, of UID
// uid, by a rollout in progress.
func lockedStatefulSet(t *testing.T, ns, name, holder, uid string) *appsv1.StatefulSet {
	t.Helper()
	s := statefulSet("")
	s.Namespace, s.Name, s.UID = ns, name, types.UID(name+"-uid")
	raw, err := json.Marshal(rollout.Record{Holder: holder, HolderUID: types.UID(uid), RolloutID: "r-" + name, SpecHash: "0123456789abcdef",
		Images: map[string]string{"app": "registry.example/app:v2"}, PreviousImages: map[string]string{"app": "registry.example/app:v1"},
		Phase: rollout.PhaseProgressing, StartedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{workload.LockAnnotation: string(raw)}
	return s
}

// customRun is a run of ours, ns/name of UID uid.
func customRun(ns, name, uid string) *v1beta1.CustomRun {
	r := embedded(target)
	r.Namespace, r.Name, r.UID = ns, name, types.UID(uid)
	return r
}

// logLinesOf are the lines of logs that hold every one of subs.
func logLinesOf(logs string, subs ...string) []string {
	var out []string
	for line := range strings.Lines(logs) {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}
