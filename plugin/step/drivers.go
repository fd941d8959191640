package step

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
)

// driverKind is what a driver does.
type driverKind string

const (
	driveRollout  driverKind = "rollout"
	driveRollback driverKind = "rollback"
	drivePromote  driverKind = "promotion"
)

// job is what a driver of the step plugin does: its rollout, its rollback or its full promotion.
// One at a time per rollout: a new one stops the old one first.
type job struct {
	kind driverKind
	// config is the step config a rollout driver drives, canonical: another config needs
	// another driver.
	config string
}

type driver = drivers.Driver[job]

// busy reports whether old is a driver still under way.
func busy(old *driver) bool { return old != nil && !old.Finished() }

// busyElse reports whether old is a rollback or a promotion still under way: those end first,
// while a rollout driver gives way.
func busyElse(old *driver) bool { return busy(old) && old.Job.kind != driveRollout }

// start starts a driver of req's rollout doing kind with run, in place of the rollout's driver,
// unless keep keeps that one (see drivers.Registry.Start); it logs the driver's start and end.
func (p *Plugin) start(req request, kind driverKind, config string, keep func(old *driver) bool,
	run func(ctx context.Context, d *driver) (rollout.Status, error)) (*driver, bool) {
	log := p.log.With(append([]any{"rollout", req.Rollout}, rollout.LogAttrs(req.Spec.Target)...)...)
	return p.drivers.Start(req.key, job{kind: kind, config: config}, keep, func(ctx context.Context, d, _ *driver) (rollout.Status, error) {
		log.Info("driving", "for", string(kind))
		st, err := run(ctx, d)
		if st.Analysis == nil {
			// The step's verdict names the last batch analysis seen.
			st.Analysis = d.Status().Analysis
		}
		if st.RolloutID != "" {
			log = log.With("rolloutID", st.RolloutID)
		}
		log.Info("driver ended", "for", string(kind), "phase", st.Phase, "err", err)
		return st, err
	})
}

// driverFor returns the driver of req, starting one when there is none, when it drives another
// config (the old one stops first), or when it finished and the step starts afresh. A rollback
// or promotion under way is returned as it is: it ends first.
func (p *Plugin) driverFor(e *rollout.Driver, req request, fresh bool) *driver {
	keep := func(old *driver) bool {
		return busyElse(old) || old != nil && old.Job.kind == driveRollout && old.Job.config == req.Canonical && !(fresh && old.Finished())
	}
	d, _ := p.start(req, driveRollout, req.Canonical, keep, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.Drive(ctx, req.Spec, d.OnStatus)
	})
	return d
}

// rollbackFor returns the driver rolling back req's target, starting one (in place of any other
// driver of the key) unless one is under way.
func (p *Plugin) rollbackFor(e *rollout.Driver, req request) *driver {
	d, _ := p.startRollback(e, req, func(old *driver) bool { return busy(old) && old.Job.kind == driveRollback })
	return d
}

// startRollback starts the rollback of req's target in place of the key's driver, unless keep
// keeps that one.
func (p *Plugin) startRollback(e *rollout.Driver, req request, keep func(old *driver) bool) (*driver, bool) {
	rb := req.Spec.Rollback()
	return p.start(req, driveRollback, "", keep, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.DriveAbort(ctx, rb, d.OnStatus)
	})
}

// finishRollback starts a rollback driver for req unless a driver of its target is under way,
// and says whether it started one.
func (p *Plugin) finishRollback(e *rollout.Driver, req request) bool {
	_, started := p.startRollback(e, req, busy)
	return started
}

// promoteFor starts the full promotion of req's rollout (the Rollout's UID uid) in place of its
// driver, or returns the rollback under way, which goes on.
func (p *Plugin) promoteFor(e *rollout.Driver, req request, uid types.UID) *driver {
	d, _ := p.startPromote(e, req, uid, busyElse)
	return d
}

// promoteIdle starts the full promotion of req's rollout (the Rollout's UID uid) unless a driver
// of its target is under way, and says whether it started one.
func (p *Plugin) promoteIdle(e *rollout.Driver, req request, uid types.UID) bool {
	_, started := p.startPromote(e, req, uid, busy)
	return started
}

// startPromote starts the full promotion of req's rollout in place of the key's driver, unless
// keep keeps that one.
func (p *Plugin) startPromote(e *rollout.Driver, req request, uid types.UID, keep func(old *driver) bool) (*driver, bool) {
	return p.start(req, drivePromote, "", keep, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return promote(ctx, e, req, uid, d)
	})
}
