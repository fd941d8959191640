package drivers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

var key = Key{Holder: "argo:shop/web", Target: "StatefulSet shop/web"}

// untilStopped runs until its driver is stopped, then ends as the engine's loops do.
func untilStopped(ctx context.Context, d, _ *Driver[string]) (rollout.Status, error) {
	d.OnStatus(rollout.Status{Phase: rollout.PhaseProgressing})
	<-ctx.Done()
	return d.Status(), fmt.Errorf("stopped between two steps: %w", ctx.Err())
}

// ends returns a Run that ends with st at once.
func ends(st rollout.Status, err error) Run[string] {
	return func(context.Context, *Driver[string], *Driver[string]) (rollout.Status, error) { return st, err }
}

func newRegistry(t *testing.T) *Registry[string] {
	t.Helper()
	r := &Registry[string]{}
	t.Cleanup(r.StopAll)
	return r
}

func TestKeyOf(t *testing.T) {
	spec := rollout.Spec{Holder: "argo:shop/web", Target: rollout.Ref{Kind: rollout.StatefulSet, Namespace: "shop", Name: "web"}}
	if got := KeyOf(spec); got != key {
		t.Errorf("KeyOf = %+v, want %+v", got, key)
	}
}

// A driver started in place of another runs only once the old one ended its step, and sees it.
func TestStartInPlaceOf(t *testing.T) {
	r := newRegistry(t)
	old, started := r.Start(key, "rollout", nil, untilStopped)
	if !started || r.Get(key) != old {
		t.Fatal("the first driver did not start")
	}
	var sawOld *Driver[string]
	oldEnded := false
	next, started := r.Start(key, "rollback", nil, func(_ context.Context, d, o *Driver[string]) (rollout.Status, error) {
		sawOld, oldEnded = o, o.Finished()
		return rollout.Status{Phase: rollout.PhaseRolledBack}, nil
	})
	if !started || r.Get(key) != next || next.Job != "rollback" {
		t.Fatal("the second driver did not take the key")
	}
	st, err := next.Wait()
	if st.Phase != rollout.PhaseRolledBack || err != nil {
		t.Errorf("Result = %+v, %v; want RolledBack", st, err)
	}
	if sawOld != old || !oldEnded {
		t.Errorf("the new driver ran with old %p (ended %t), want %p ended", sawOld, oldEnded, old)
	}
	if _, err := old.Result(); !errors.Is(err, context.Canceled) {
		t.Errorf("the old driver ended with %v, want it stopped", err)
	}
	if r.Len() != 1 {
		t.Errorf("%d drivers, want 1", r.Len())
	}
}

// keep sees the key's driver, nil for none, and keeps it from being replaced.
func TestStartKeep(t *testing.T) {
	r := newRegistry(t)
	var seen []*Driver[string]
	keepRunning := func(old *Driver[string]) bool {
		seen = append(seen, old)
		return old != nil && !old.Finished()
	}
	first, started := r.Start(key, "a", keepRunning, untilStopped)
	if !started || seen[0] != nil {
		t.Fatalf("no driver: started %t, keep saw %v", started, seen[0])
	}
	if got, started := r.Start(key, "b", keepRunning, untilStopped); started || got != first {
		t.Error("a running driver was replaced although keep kept it")
	}
	first.Stop()
	second, started := r.Start(key, "c", keepRunning, ends(rollout.Status{Phase: rollout.PhaseSucceeded}, nil))
	if !started || second == first || second.Job != "c" {
		t.Error("an ended driver was kept")
	}
}

// Finished, Status, Result and Outcome say where a driver is and how it ended; a status kept
// without an analysis has the last one seen.
func TestDriverState(t *testing.T) {
	r := newRegistry(t)
	run := &analysis.Run{Batch: 1, Verdict: analysis.Inconclusive}
	step := make(chan struct{})
	d, _ := r.Start(key, "rollout", nil, func(ctx context.Context, d, _ *Driver[string]) (rollout.Status, error) {
		d.OnStatus(rollout.Status{Phase: rollout.PhaseAnalyzing, Analysis: run})
		d.OnStatus(rollout.Status{Phase: rollout.PhaseProgressing})
		<-step
		return rollout.Status{Phase: rollout.PhasePaused}, nil
	})
	for d.Status().Phase != rollout.PhaseProgressing {
		time.Sleep(time.Millisecond)
	}
	if d.Finished() {
		t.Error("Finished before the driver ended")
	}
	if st := d.Status(); st.Analysis != run {
		t.Errorf("status %+v lost the analysis", st)
	}
	close(step)
	<-d.Done()
	if !d.Finished() {
		t.Error("not Finished once done")
	}
	st, err := d.Result()
	if err != nil || st.Phase != rollout.PhasePaused || st.Analysis != nil {
		t.Errorf("Result = %+v, %v; want Paused, as Run returned it", st, err)
	}
	if o := d.Outcome(); o.Kind != rollout.Paused {
		t.Errorf("Outcome = %v, want Paused", o.Kind)
	}
}

// Forget drops the driver it names, and only that one.
func TestForget(t *testing.T) {
	r := newRegistry(t)
	first, _ := r.Start(key, "a", nil, ends(rollout.Status{}, errors.New("API down")))
	first.Wait()
	second, _ := r.Start(key, "b", nil, untilStopped)
	r.Forget(key, first)
	if r.Get(key) != second {
		t.Fatal("Forget of a replaced driver dropped its successor")
	}
	r.Forget(key, second)
	if r.Get(key) != nil || r.Len() != 0 {
		t.Error("Forget left the driver")
	}
	if second.Finished() {
		t.Error("Forget stopped the driver: it only drops it")
	}
	second.Stop()
	r.Forget(Key{Holder: "none"}, nil)
}

// Many callers at once, on a few keys: one driver per key runs at a time, each new one after the
// old ended (or was forgotten once it ended), and the registry stays consistent (run under -race).
func TestConcurrentStarts(t *testing.T) {
	r := newRegistry(t)
	var running [3]atomic.Int32
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			k := i % len(running)
			key := Key{Holder: "argo:shop/web", Target: fmt.Sprint("StatefulSet shop/web-", k)}
			d, _ := r.Start(key, fmt.Sprint(i), func(old *Driver[string]) bool { return i%4 == 0 && old != nil && !old.Finished() },
				func(ctx context.Context, d, _ *Driver[string]) (rollout.Status, error) {
					if running[k].Add(1) > 1 {
						overlap.Store(true)
					}
					defer running[k].Add(-1)
					d.OnStatus(rollout.Status{Updated: i})
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
					return d.Status(), nil
				})
			_ = d.Status()
			if i%5 == 0 {
				// As a plugin does: a driver is forgotten once it ended.
				d.Wait()
				r.Forget(key, d)
			}
			_ = r.Get(key)
			_ = r.Len()
		})
	}
	wg.Wait()
	r.StopAll()
	if overlap.Load() {
		t.Error("two drivers of one key ran at once")
	}
	if r.Len() != 0 {
		t.Errorf("%d drivers after StopAll", r.Len())
	}
}

// Lazy makes its value on the first Get, again after a failure, and runs started once.
func TestLazy(t *testing.T) {
	calls, starts := 0, 0
	l := NewLazy("inplace-rollout/step", func() (int, error) {
		calls++
		if calls == 1 {
			return 0, errors.New("no kubeconfig")
		}
		return 42, nil
	}, func(v int) { starts += v })
	if _, err := l.Get(); err == nil || err.Error() != "starting the inplace-rollout/step plugin: no kubeconfig" {
		t.Fatalf("first Get: %v, want the failure named", err)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := l.Get(); err != nil || v != 42 {
				t.Errorf("Get = %d, %v; want 42", v, err)
			}
		})
	}
	wg.Wait()
	if calls != 2 || starts != 42 {
		t.Errorf("made %d times, started %d; want 2 and once", calls, starts/42)
	}
}
