package traffic

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
)

// job is what a driver of the traffic router does: an op for a spec.
type job struct {
	// config is the spec it drives, canonical; with op, what another call must ask for to
	// find this driver rather than replace it.
	config string
	op     op

	// Set by the driver before it ends, read once it finished. nothing says an abort found
	// nothing to roll back. rec is the target's record as the driver left it (recErr when it
	// could not be read): the outcome stands while the record is the same.
	nothing bool
	rec     *rollout.Record
	recErr  error
}

type driver = drivers.Driver[*job]

// driverFor returns the driver of req for o. A driver of the same spec and op that still runs is
// kept; one that settled is kept while the target's record is as it left it, which one GET
// confirms; otherwise a new driver replaces it (the old one ends its step first).
func (p *Plugin) driverFor(e *rollout.Driver, req request, o op) *driver {
	old := p.drivers.Get(req.key)
	if old != nil && old.Job.config == req.Canonical && old.Job.op == o {
		if !old.Finished() {
			return old
		}
		if old.Job.recErr == nil && !old.Outcome().Transient() {
			rec, err := e.Record(context.Background(), req.Spec.Target)
			if err == nil && rec.Equal(old.Job.rec) {
				return old
			}
		}
	}
	// Another call may have replaced old meanwhile: its driver stands.
	replaced := func(cur *driver) bool { return cur != old && cur != nil }
	d, _ := p.drivers.Start(req.key, &job{config: req.Canonical, op: o}, replaced, func(ctx context.Context, d, old *driver) (rollout.Status, error) {
		return p.run(ctx, e, req, d, old)
	})
	return d
}

// run is a driver's work.
func (p *Plugin) run(ctx context.Context, e *rollout.Driver, req request, d, old *driver) (rollout.Status, error) {
	log := p.log.With(append([]any{"rollout", req.Rollout}, rollout.LogAttrs(req.Spec.Target)...)...)
	var (
		st  rollout.Status
		err error
	)
	switch d.Job.op.kind {
	case opAbort:
		st, d.Job.nothing, err = p.abort(ctx, e, req, d.OnStatus, log)
	default:
		spec := req.Spec
		if d.Job.op.kind == opHold {
			upTo := intstr.FromString(strconv.Itoa(int(d.Job.op.weight)) + "%")
			spec.UpTo = &upTo
		}
		log.Info("driving", "op", d.Job.op.String())
		if err = p.finishRollback(ctx, e, req, d.OnStatus, log); err == nil {
			st, err = p.drive(ctx, e, spec, d, old, log)
		}
	}
	o := rollout.OutcomeOf(st, err)
	if o.Kind != rollout.Interrupted {
		if st.RolloutID != "" {
			log = log.With("rolloutID", st.RolloutID)
		}
		log.Info("driver ended", "op", d.Job.op.String(), "phase", st.Phase, "updated", st.Updated, "total", st.Total, "err", err)
	}
	if !o.Transient() {
		// The outcome stands while the record stays as it is now.
		d.Job.rec, d.Job.recErr = e.Record(context.WithoutCancel(ctx), req.Spec.Target)
	}
	return st, err
}

// abort rolls back the Rollout's rollout in flight: one its holder runs, or one that succeeded
// to the images of this revision (Argo promoted nothing yet). A finished rollout of earlier
// images is not this revision's to undo, and no rollout at all leaves nothing to do.
func (p *Plugin) abort(ctx context.Context, e *rollout.Driver, req request, onStatus func(rollout.Status), log *slog.Logger) (rollout.Status, bool, error) {
	s := req.Spec
	rec, err := e.Record(ctx, s.Target)
	if err != nil {
		return rollout.Status{}, false, err
	}
	if rec == nil || rec.Holder != s.Holder || !(rec.Active() || rec.Phase == rollout.PhaseSucceeded && rec.SpecHash == s.Hash()) {
		return rollout.Status{}, true, nil
	}
	log.Info("rolling back", "rolloutID", rec.RolloutID)
	st, err := e.DriveAbort(ctx, s.Rollback(), onStatus)
	return st, false, err
}

// drive runs Drive for d. When the driver it replaces paused on an inconclusive analysis and d
// asks for more (a higher weight, or full promotion), a person promoted the Rollout past the
// step that paused, since Argo goes on from a setWeight step only once its weight is verified
// or promoted: that is the accept the pause waits for.
func (p *Plugin) drive(ctx context.Context, e *rollout.Driver, spec rollout.Spec, d, old *driver, log *slog.Logger) (rollout.Status, error) {
	pause, paused := rollout.Pause{}, false
	if old != nil && old.Job.config == d.Job.config && beyond(d.Job.op, old.Job.op) {
		if st, err := old.Result(); err == nil {
			pause, paused = rollout.PauseOf(st)
		}
	}
	if paused {
		// Accept only the pause that is still there: a late accept must not accept another.
		rec, err := e.Record(ctx, spec.Target)
		if err == nil && rec != nil && rec.Phase == rollout.PhasePaused && rec.RolloutID == pause.RolloutID {
			log.Info("accepting the paused batch: the Rollout was promoted past it", "rolloutID", pause.RolloutID, "batch", pause.Batch, "pods", pause.Pods)
			return e.AcceptAndDrive(ctx, spec, pause, d.OnStatus)
		}
	}
	return e.Drive(ctx, spec, d.OnStatus)
}

// finishRollback finishes a rollback of the Rollout's earlier images that was cut short (the
// abort's driver replaced, or the plugin process killed, before it ended): a rollout cannot
// supersede a rollback, and the aborted revision will not call again.
func (p *Plugin) finishRollback(ctx context.Context, e *rollout.Driver, req request, onStatus func(rollout.Status), log *slog.Logger) error {
	s := req.Spec
	rec, err := e.Record(ctx, s.Target)
	if err != nil || rec == nil || rec.Holder != s.Holder || rec.Phase != rollout.PhaseRollingBack || rec.SpecHash == s.Hash() {
		// Drive reports a lock it cannot read; a rollback of these very images is Drive's own.
		return nil
	}
	log.Info("finishing a rollback first", "rolloutID", rec.RolloutID)
	st, err := e.DriveAbort(ctx, s.Rollback(), onStatus)
	if err != nil {
		return err
	}
	if st.Phase != rollout.PhaseRolledBack {
		return &rollout.BlockedError{Msg: fmt.Sprintf("rollout %s of other images was rolling back and did not finish (%s): %s; a person must look at its pods",
			rec.RolloutID, st.Phase, st.Message)}
	}
	return nil
}
