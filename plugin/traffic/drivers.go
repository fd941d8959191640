package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// driverKey names one rollout: its holder (the Argo Rollout) and its target.
type driverKey struct {
	holder, target string
}

// driver is one goroutine running an op for a spec.
type driver struct {
	// config is the spec it drives, canonical; with op, what another call must ask for to
	// find this driver rather than replace it.
	config string
	op     op
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status

	// Set once done is closed. final and err are the outcome; nothing says an abort found
	// nothing to roll back. lock is the target's lock as the driver left it (lockErr when it
	// could not be read): the outcome stands while the lock is the same.
	final   rollout.Status
	err     error
	nothing bool
	lock    *workload.Lock
	lockErr error
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// driverFor returns the driver of req for o. A driver of the same spec and op that still runs is
// kept; one that settled is kept while the target's lock is as it left it, which one GET
// confirms; otherwise a new driver replaces it (the old one ends its step first).
func (p *Plugin) driverFor(e *rollout.Engine, req request, o op) *driver {
	p.mu.Lock()
	old := p.drivers[req.key]
	same := old != nil && old.config == req.Canonical && old.op == o
	p.mu.Unlock()
	if same {
		if !old.finished() {
			return old
		}
		if old.lockErr == nil && settled(old.err) {
			lock, err := e.Lock(context.Background(), req.Spec.Target)
			if err == nil && sameLock(lock, old.lock) {
				return old
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.drivers[req.key]; cur != old {
		// Another call replaced it meanwhile.
		return cur
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{config: req.Canonical, op: o, cancel: cancel, done: make(chan struct{})}
	p.drivers[req.key] = d
	go p.run(ctx, e, req, d, old)
	return d
}

// run is a driver's goroutine.
func (p *Plugin) run(ctx context.Context, e *rollout.Engine, req request, d, old *driver) {
	defer close(d.done)
	log := p.log.With(append([]any{"rollout", req.Rollout}, rollout.LogAttrs(req.Spec.Target)...)...)
	if old != nil {
		// One driver per rollout at a time: the old one ends its step and stops.
		old.cancel()
		<-old.done
	}
	onStatus := func(st rollout.Status) {
		d.mu.Lock()
		d.last = st
		d.mu.Unlock()
	}
	var (
		st      rollout.Status
		err     error
		nothing bool
	)
	switch d.op.kind {
	case opAbort:
		st, nothing, err = p.abort(ctx, e, req, onStatus, log)
	default:
		spec := req.Spec
		if d.op.kind == opHold {
			upTo := intstr.FromString(strconv.Itoa(int(d.op.weight)) + "%")
			spec.UpTo = &upTo
		}
		log.Info("driving", "op", d.op.String())
		if err = p.finishRollback(ctx, e, req, onStatus, log); err == nil {
			st, err = p.drive(ctx, e, spec, d, old, onStatus, log)
		}
	}
	if !errors.Is(err, context.Canceled) {
		if st.RolloutID != "" {
			log = log.With("rolloutID", st.RolloutID)
		}
		log.Info("driver ended", "op", d.op.String(), "phase", st.Phase, "updated", st.Updated, "total", st.Total, "err", err)
	}
	var (
		lock    *workload.Lock
		lockErr error
	)
	if settled(err) {
		// The outcome stands while the lock stays as it is now.
		lock, lockErr = e.Lock(context.WithoutCancel(ctx), req.Spec.Target)
	}
	d.mu.Lock()
	d.final, d.err, d.nothing, d.lock, d.lockErr = st, err, nothing, lock, lockErr
	d.mu.Unlock()
}

// abort rolls back the Rollout's rollout in flight: one its holder runs, or one that succeeded
// to the images of this revision (Argo promoted nothing yet). A finished rollout of earlier
// images is not this revision's to undo, and no rollout at all leaves nothing to do.
func (p *Plugin) abort(ctx context.Context, e *rollout.Engine, req request, onStatus func(rollout.Status), log *slog.Logger) (rollout.Status, bool, error) {
	s := req.Spec
	lock, err := e.Lock(ctx, s.Target)
	if err != nil {
		return rollout.Status{}, false, err
	}
	if lock == nil || lock.Holder != s.Holder || !(lock.Active() || lock.Phase == workload.LockSucceeded && lock.SpecHash == s.Hash()) {
		return rollout.Status{}, true, nil
	}
	log.Info("rolling back", "rolloutID", lock.RolloutID)
	st, err := e.DriveAbort(ctx, s.Rollback(), onStatus)
	return st, false, err
}

// drive runs Drive for d. When the driver it replaces paused on an inconclusive analysis and d
// asks for more (a higher weight, or full promotion), a person promoted the Rollout past the
// step that paused, since Argo goes on from a setWeight step only once its weight is verified
// or promoted: that is the accept the pause waits for.
func (p *Plugin) drive(ctx context.Context, e *rollout.Engine, spec rollout.Spec, d, old *driver, onStatus func(rollout.Status), log *slog.Logger) (rollout.Status, error) {
	pause, paused := rollout.Pause{}, false
	if old != nil && old.config == d.config && old.err == nil && beyond(d.op, old.op) {
		pause, paused = rollout.PauseOf(old.final)
	}
	if paused {
		// Accept only the pause that is still there: a late accept must not accept another.
		lock, err := e.Lock(ctx, spec.Target)
		if err == nil && lock != nil && lock.Phase == workload.LockPaused && lock.RolloutID == pause.RolloutID {
			log.Info("accepting the paused batch: the Rollout was promoted past it", "rolloutID", pause.RolloutID, "batch", pause.Batch, "pods", pause.Pods)
			return e.AcceptAndDrive(ctx, spec, pause, onStatus)
		}
	}
	return e.Drive(ctx, spec, onStatus)
}

// finishRollback finishes a rollback of the Rollout's earlier images that was cut short (the
// abort's driver replaced, or the plugin process killed, before it ended): a rollout cannot
// supersede a rollback, and the aborted revision will not call again.
func (p *Plugin) finishRollback(ctx context.Context, e *rollout.Engine, req request, onStatus func(rollout.Status), log *slog.Logger) error {
	s := req.Spec
	lock, err := e.Lock(ctx, s.Target)
	if err != nil || lock == nil || lock.Holder != s.Holder || lock.Phase != workload.LockRollingBack || lock.SpecHash == s.Hash() {
		// Drive reports a lock it cannot read; a rollback of these very images is Drive's own.
		return nil
	}
	log.Info("finishing a rollback first", "rolloutID", lock.RolloutID)
	st, err := e.DriveAbort(ctx, s.Rollback(), onStatus)
	if err != nil {
		return err
	}
	if st.Phase != rollout.PhaseRolledBack {
		return &rollout.BlockedError{Msg: fmt.Sprintf("rollout %s of other images was rolling back and did not finish (%s): %s; a person must look at its pods",
			lock.RolloutID, st.Phase, st.Message)}
	}
	return nil
}

// settled reports whether a driver that ended with err reached an outcome that stands (none, or
// an error no retry fixes) rather than trouble that may pass.
func settled(err error) bool { return err == nil || !rollout.Retryable(err) }

// sameLock reports whether two reads of a lock say the same.
func sameLock(a, b *workload.Lock) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
