// Package drivers is what the two Argo plugins share to run rollouts in the background: a
// registry of driver goroutines, one per rollout (its holder and its target), each started in
// place of the one before it, and the engine made on the first call that needs it.
//
// Argo's calls hold a controller worker and have no timeout, so a plugin never waits for pods in
// a call: a driver goroutine runs the engine's loop (Driver.Drive, DriveAbort) at the engine's
// pace, and the calls start, find or read it. The drivers are a cache: the engine reads every
// fact from the cluster, so a new plugin process picks up where the last one was. Which driver a
// call keeps, starts or replaces is each plugin's own policy; this package keeps the goroutines.
//
// It lives with the plugins, not in pkg/rollout: only a plugin process, serving every Rollout
// from long-lived goroutines, needs one. The CLI runs one loop per process and the CustomRun
// controller steps the engine from its work queue.
package drivers

import (
	"context"
	"fmt"
	"sync"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Key names one rollout: its holder (the Argo Rollout) and its target. Two Rollouts on one
// workload get two drivers, and the engine's lock lets one of them through.
type Key struct {
	Holder, Target string
}

// KeyOf is the key of spec's rollout.
func KeyOf(spec rollout.Spec) Key {
	return Key{Holder: spec.Holder, Target: spec.Target.String()}
}

// Driver is one goroutine driving a target for a holder. Job is what it does, in the plugin's
// own terms, set when it starts.
type Driver[J any] struct {
	Job J

	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status
	// lastAnalysis is the last batch analysis seen, kept for a status that carries none: a
	// plugin's verdict names it.
	lastAnalysis *analysis.Run
	// final and err are set before done is closed.
	final rollout.Status
	err   error
}

// OnStatus keeps st as the driver's last status, with the last analysis seen when it has none:
// the onStatus of the engine's loops.
func (d *Driver[J]) OnStatus(st rollout.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.Analysis == nil {
		st.Analysis = d.lastAnalysis
	} else {
		d.lastAnalysis = st.Analysis
	}
	d.last = st
}

// Status is the last status OnStatus kept.
func (d *Driver[J]) Status() rollout.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// Done is closed once the driver ended.
func (d *Driver[J]) Done() <-chan struct{} { return d.done }

// Finished reports whether the driver ended.
func (d *Driver[J]) Finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Result is the status and error the driver's Run returned, once Finished; zero before.
func (d *Driver[J]) Result() (rollout.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.final, d.err
}

// Outcome is what the driver came to, once Finished.
func (d *Driver[J]) Outcome() rollout.Outcome {
	return rollout.OutcomeOf(d.Result())
}

// Wait waits for the driver to end and returns its Result.
func (d *Driver[J]) Wait() (rollout.Status, error) {
	<-d.done
	return d.Result()
}

// Stop stops the driver and waits for it to end: the engine ends the step under way first.
func (d *Driver[J]) Stop() {
	d.cancel()
	<-d.done
}

// Run is a driver's work: it drives with ctx (cancelled when another driver replaces it), gives
// d.OnStatus to the engine, and returns how the rollout ended. old is the driver d replaced, nil
// for none; it ended before Run is called.
type Run[J any] func(ctx context.Context, d, old *Driver[J]) (rollout.Status, error)

// Registry holds one driver per key. The zero value is ready to use; it is safe for concurrent
// use, as Argo runs each call in its own goroutine.
type Registry[J any] struct {
	mu sync.Mutex
	m  map[Key]*Driver[J]
}

// Start starts a driver of key doing job with run, in place of the key's driver, which stops
// first: it ends its step, then the new driver runs. One driver per key runs at a time. When keep
// says so of the key's driver (nil when there is none), that one is returned instead, and started
// is false; keep runs with the registry locked, so that what it decides still holds when the new
// driver takes its place.
func (r *Registry[J]) Start(key Key, job J, keep func(old *Driver[J]) bool, run Run[J]) (d *Driver[J], started bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.m[key]
	if keep != nil && keep(old) {
		return old, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	d = &Driver[J]{Job: job, cancel: cancel, done: make(chan struct{})}
	if r.m == nil {
		r.m = map[Key]*Driver[J]{}
	}
	r.m[key] = d
	go func() {
		defer close(d.done)
		defer cancel()
		if old != nil {
			old.Stop()
		}
		st, err := run(ctx, d, old)
		d.mu.Lock()
		d.final, d.err = st, err
		d.mu.Unlock()
	}()
	return d, true
}

// Get is the driver of key, nil for none.
func (r *Registry[J]) Get(key Key) *Driver[J] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[key]
}

// Forget drops d, the driver of key, from the registry: the next call starts afresh. A driver
// that replaced d meanwhile stays.
func (r *Registry[J]) Forget(key Key, d *Driver[J]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[key] == d {
		delete(r.m, key)
	}
}

// Len is how many drivers the registry holds, ended or not.
func (r *Registry[J]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// StopAll stops every driver, waits for each to end, and forgets them.
func (r *Registry[J]) StopAll() {
	r.mu.Lock()
	all := make([]*Driver[J], 0, len(r.m))
	for _, d := range r.m {
		all = append(all, d)
	}
	clear(r.m)
	r.mu.Unlock()
	for _, d := range all {
		d.Stop()
	}
}

// Lazy is what a plugin makes on the first call that needs it (its engine, its clients), made
// again on the next call after a failure: Argo never calls InitPlugin twice, so a failed start
// must not be final.
type Lazy[C any] struct {
	name    string
	newC    func() (C, error)
	started func(C)

	mu   sync.Mutex
	made bool
	c    C
}

// NewLazy makes the value with newC, for the plugin called name. started, when not nil, runs
// once, after the first newC that succeeds, before any call gets the value.
func NewLazy[C any](name string, newC func() (C, error), started func(C)) *Lazy[C] {
	return &Lazy[C]{name: name, newC: newC, started: started}
}

// Get is the value, made now if it was not yet.
func (l *Lazy[C]) Get() (C, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.made {
		return l.c, nil
	}
	c, err := l.newC()
	if err != nil {
		var zero C
		return zero, fmt.Errorf("starting the %s plugin: %w", l.name, err)
	}
	l.c, l.made = c, true
	if l.started != nil {
		l.started(c)
	}
	return c, nil
}
