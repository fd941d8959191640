package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// fakeClock is an Engine's clock that only Drive's waits move.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// wait stands for Drive's timer: it records the wait and moves the clock past it at once.
func (c *fakeClock) wait(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

var driveSpec = Spec{
	Target:         workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"},
	Images:         map[string]string{"app": "registry.example/app:v2"},
	Holder:         "cli",
	MaxUnavailable: intstr.FromInt32(1),
	Timeout:        time.Minute,
}

// driveStatefulSet is web in shop, with no pods. lock, when not nil, is its rollout lock; a
// StatefulSet with no lock is one its controller has not observed yet, so a rollout waits
// without writing.
func driveStatefulSet(t *testing.T, lock *Record) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 2, Annotations: map[string]string{}},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}},
			},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1},
	}
	if lock != nil {
		sts.Annotations[workload.LockAnnotation] = string(mustMarshal(t, lock))
	}
	return sts
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// pausedLock is the lock of driveSpec's rollout, paused on the analysis of batch.
func pausedLock(t *testing.T, batch int) *Record {
	t.Helper()
	cfg, err := analysis.Decode([]byte("prometheus: {address: 'http://prom:9090'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	run := analysis.NewRun(cfg, batch, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	run.Pods = batch
	return &Record{
		Holder: "cli", RolloutID: "r-1", SpecHash: driveSpec.Hash(), Images: driveSpec.Images,
		PreviousImages: map[string]string{"app": "registry.example/app:v1"},
		Phase:          PhasePaused, Message: "analysis of batch 1: Inconclusive", Reason: ReasonAnalysisInconclusive,
		AcceptedPods: batch - 1, Analysis: encodeRun(run),
	}
}

// failing makes the first n calls of verb on resource fail with err; n < 0 fails them all.
func failing(client *fake.Clientset, verb, resource string, n int, err error) *int {
	calls := 0
	client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if n < 0 || calls <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func TestDrive(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	unavailable := apierrors.NewServiceUnavailable("etcd is starting")
	tests := []struct {
		name string
		// lock is the StatefulSet's lock; nil leaves the rollout waiting for the controller.
		lock   func(*testing.T) *Record
		fail   int // how many reads of the StatefulSet fail; -1: all
		err    error
		budget time.Duration
		// stopAfter cancels the context once onStatus saw that many statuses; 0 never.
		stopAfter int

		wantPhase    Phase
		wantStatuses int
		wantWaits    []time.Duration
		wantErr      func(error) bool
	}{
		{
			name: "settles at once", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			wantPhase: PhasePaused, wantStatuses: 1,
		},
		{
			name: "retries with a doubling backoff, then settles", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			fail: 7, err: unavailable,
			wantPhase: PhasePaused, wantStatuses: 1,
			wantWaits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second},
		},
		{
			name: "gives up after the error budget", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			fail: -1, err: unavailable, budget: time.Minute,
			// Failures at 0, 1, 3, 7, 15, 31s and 61s: the last is past the minute.
			wantWaits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second},
			wantErr: func(err error) bool {
				var ae *APIUnavailableError
				return errors.As(err, &ae) && ae.For == time.Minute && !ae.RollingBack && apierrors.IsServiceUnavailable(ae.Err) &&
					strings.Contains(err.Error(), "API trouble") && strings.Contains(err.Error(), "StatefulSet shop/web")
			},
		},
		{
			name: "a permanent error returns at once", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			fail: -1, err: apierrors.NewForbidden(gr, "web", errors.New("no")),
			wantErr: func(err error) bool {
				var pe *PermanentError
				return errors.As(err, &pe) && apierrors.IsForbidden(err)
			},
		},
		{
			name: "bad input returns at once", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			fail: -1, err: apierrors.NewNotFound(gr, "web"),
			wantErr: func(err error) bool {
				var ie *InvalidError
				return errors.As(err, &ie) && strings.Contains(err.Error(), "not found")
			},
		},
		{
			name: "requeues as the step asks until cancelled", lock: func(*testing.T) *Record { return nil },
			stopAfter: 3,
			wantPhase: PhaseProgressing, wantStatuses: 3, wantWaits: []time.Duration{busyRequeue, busyRequeue, busyRequeue},
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
		{
			name: "cancelled while retrying", lock: func(t *testing.T) *Record { return pausedLock(t, 1) },
			fail: -1, err: unavailable, stopAfter: -1,
			wantWaits: []time.Duration{time.Second},
			wantErr:   func(err error) bool { return errors.Is(err, context.Canceled) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(driveStatefulSet(t, tt.lock(t)))
			if tt.fail != 0 {
				failing(client, "get", "statefulsets", tt.fail, tt.err)
			}
			clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			e := &Driver{Engine: &Engine{Client: client, Now: clock.Now}, ErrorBudget: tt.budget, wait: clock.wait}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			if tt.stopAfter < 0 {
				// The first wait is cut short by a Ctrl-C.
				e.wait = func(ctx context.Context, d time.Duration) error {
					cancel()
					return clock.wait(ctx, d)
				}
			}
			var seen []Phase
			st, err := e.Drive(ctx, driveSpec, func(s Status) {
				seen = append(seen, s.Phase)
				if len(seen) == tt.stopAfter {
					cancel()
				}
			})
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Drive: %v", err)
			}
			if tt.wantErr != nil && !tt.wantErr(err) {
				t.Fatalf("Drive returned %T %v, not the error wanted", err, err)
			}
			if st.Phase != tt.wantPhase || len(seen) != tt.wantStatuses {
				t.Errorf("last status %s after %d statuses (%v), want %s after %d", st.Phase, len(seen), seen, tt.wantPhase, tt.wantStatuses)
			}
			if !slices.Equal(clock.waits, tt.wantWaits) {
				t.Errorf("waited %v, want %v", clock.waits, tt.wantWaits)
			}
		})
	}
}

// TestDriveBackoffStartsAfreshAfterASuccess: a step that succeeds between errors resets the
// backoff and the error budget: the next error waits the first delay again.
func TestDriveBackoffStartsAfreshAfterASuccess(t *testing.T) {
	client := fake.NewClientset(driveStatefulSet(t, nil))
	// Reads of the StatefulSet fail, fail, pass, fail, fail, fail, then pass.
	fails := []bool{true, true, false, true, true, true}
	reads := 0
	client.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads++
		if reads <= len(fails) && fails[reads-1] {
			return true, nil, apierrors.NewServiceUnavailable("etcd is starting")
		}
		return false, nil, nil
	})
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := &Driver{Engine: &Engine{Client: client, Now: clock.Now}, ErrorBudget: 5 * time.Second, wait: clock.wait}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	statuses := 0
	_, err := e.Drive(ctx, driveSpec, func(Status) {
		if statuses++; statuses == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Drive: %v, want it cancelled after the second status", err)
	}
	// 1+2s of errors, then 1+2+4s: over the budget of 5s in all, within it since the success.
	// The last wait is cut short by the cancel.
	want := []time.Duration{time.Second, 2 * time.Second, busyRequeue, time.Second, 2 * time.Second, 4 * time.Second, busyRequeue}
	if !slices.Equal(clock.waits, want) {
		t.Errorf("waited %v, want %v", clock.waits, want)
	}
}

// TestDriveAbortGivesUpAsARollback: API trouble while a rollback begins is reported as such,
// with RollingBack set, after the budget.
func TestDriveAbortGivesUpAsARollback(t *testing.T) {
	lock := pausedLock(t, 1)
	lock.Phase = PhaseProgressing
	client := fake.NewClientset(driveStatefulSet(t, lock))
	patches := failing(client, "patch", "statefulsets", -1, apierrors.NewTimeoutError("slow", 1))
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := &Driver{Engine: &Engine{Client: client, Now: clock.Now}, ErrorBudget: 10 * time.Second, wait: clock.wait}
	r := RollbackSpec{Target: driveSpec.Target, Holder: "cli", MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute}
	_, err := e.DriveAbort(context.Background(), r, nil)
	var ae *APIUnavailableError
	if !errors.As(err, &ae) || !ae.RollingBack || ae.For != 10*time.Second || !strings.Contains(err.Error(), "its rollback goes on") {
		t.Fatalf("DriveAbort: %T %v; want an *APIUnavailableError of a rollback after 10s", err, err)
	}
	if *patches != 5 { // at 0, 1, 3, 7 and 15s
		t.Errorf("%d lock writes tried, want 5", *patches)
	}
}

func TestAccept(t *testing.T) {
	tests := []struct {
		name   string
		lock   func(*testing.T) *Record
		holder string
		pause  Pause
		want   string // in the error; empty: accepted
	}{
		{"the paused batch", func(t *testing.T) *Record { return pausedLock(t, 2) }, "cli", Pause{"r-1", 2, 2}, ""},
		{"another batch", func(t *testing.T) *Record { return pausedLock(t, 2) }, "cli", Pause{"r-1", 1, 1},
			"rollout r-1 is paused on the analysis of batch 2 (2 pods), not batch 1 (1 pods); nothing was accepted"},
		{"the same batch number at another pod count", func(t *testing.T) *Record { return pausedLock(t, 2) }, "cli", Pause{"r-1", 2, 3},
			"rollout r-1 is paused on the analysis of batch 2 (2 pods), not batch 2 (3 pods); nothing was accepted"},
		{"another rollout", func(t *testing.T) *Record { return pausedLock(t, 2) }, "cli", Pause{"r-0", 2, 2},
			"rollout r-0 is not the workload's rollout (rollout r-1 is, Paused); nothing was accepted"},
		{"another holder", func(t *testing.T) *Record { return pausedLock(t, 2) }, "argo:shop/web", Pause{"r-1", 2, 2}, "only its holder"},
		{"not paused", func(t *testing.T) *Record {
			l := pausedLock(t, 2)
			l.Phase = PhaseRollingBack
			return l
		}, "cli", Pause{"r-1", 2, 2}, "rollout r-1 is RollingBack, not paused; nothing was accepted"},
		{"no rollout", func(*testing.T) *Record { return nil }, "cli", Pause{"r-1", 2, 2}, "no in-place rollout recorded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(driveStatefulSet(t, tt.lock(t)))
			e := &Engine{Client: client}
			st, err := e.Accept(context.Background(), driveSpec.Target, tt.holder, tt.pause)
			var writes []k8stesting.Action
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" && a.GetVerb() != "list" {
					writes = append(writes, a)
				}
			}
			if tt.want != "" {
				var ie *InvalidError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Accept: %v; want an *InvalidError containing %q", err, tt.want)
				}
				if len(writes) != 0 {
					t.Errorf("a refused accept wrote: %v", writes)
				}
				return
			}
			if err != nil {
				t.Fatalf("Accept: %v", err)
			}
			if st.Phase != PhaseProgressing || st.Message != "batch 2 accepted; resuming" || len(writes) != 1 {
				t.Fatalf("Accept: %s %q with %d writes; want Progressing, batch 2 accepted, one write", st.Phase, st.Message, len(writes))
			}
			sts, err := client.AppsV1().StatefulSets("shop").Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w, err := workload.Load(context.Background(), client, driveSpec.Target)
			if err != nil {
				t.Fatal(err)
			}
			if l := mustRecordOf(t, w.Ref(), w.Lock()); l.Phase != PhaseProgressing || l.AcceptedPods != 2 || l.Message != "" {
				t.Errorf("lock after the accept: %s, accepted pods %d, reason %q; want Progressing, 2, none\n%s", l.Phase, l.AcceptedPods, l.Message, sts.Annotations[workload.LockAnnotation])
			}
		})
	}
}
