package step

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// driverKey names one rollout: its holder (the Argo Rollout) and its target. Two Rollouts on one
// workload get two drivers, and the engine's lock lets one of them through.
type driverKey struct {
	holder, target string
}

// driverKind is what a driver does.
type driverKind string

const (
	driveRollout  driverKind = "rollout"
	driveRollback driverKind = "rollback"
	drivePromote  driverKind = "promotion"
)

// driver is one goroutine driving a target for a holder: its rollout, its rollback or its full
// promotion. One at a time per key: a new one stops the old one first.
type driver struct {
	kind driverKind
	// config is the step config a rollout driver drives, canonical: another config needs
	// another driver.
	config string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last rollout.Status
	// lastAnalysis is the last batch analysis seen, kept for the step's verdict.
	lastAnalysis *analysis.Run
	// final and err are set once done is closed.
	final rollout.Status
	err   error
}

// record keeps a status of the driver's loop, with the last analysis seen when it has none.
func (d *driver) record(st rollout.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = d.withAnalysis(st)
}

func (d *driver) withAnalysis(st rollout.Status) rollout.Status {
	if st.Analysis == nil {
		st.Analysis = d.lastAnalysis
	} else {
		d.lastAnalysis = st.Analysis
	}
	return st
}

func (d *driver) status() rollout.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// startLocked starts a driver for req's key that runs run, in place of the key's driver, which
// it stops first (its step ends). p.mu must be held.
func (p *Plugin) startLocked(req request, kind driverKind, config string,
	run func(ctx context.Context, d *driver) (rollout.Status, error)) *driver {
	key := req.key
	old := p.drivers[key]
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{kind: kind, config: config, cancel: cancel, done: make(chan struct{})}
	p.drivers[key] = d
	log := p.log.With(append([]any{"rollout", req.Rollout}, rollout.LogAttrs(req.Spec.Target)...)...)
	go func() {
		defer close(d.done)
		if old != nil {
			old.cancel()
			<-old.done
		}
		log.Info("driving", "for", string(kind))
		st, err := run(ctx, d)
		d.mu.Lock()
		d.final, d.err = d.withAnalysis(st), err
		d.mu.Unlock()
		if st.RolloutID != "" {
			log = log.With("rolloutID", st.RolloutID)
		}
		log.Info("driver ended", "for", string(kind), "phase", st.Phase, "err", err)
	}()
	return d
}

// driverFor returns the driver of req, starting one when there is none, when it drives another
// config (the old one stops first), or when it finished and the step starts afresh. A rollback
// or promotion under way is returned as it is: it ends first.
func (p *Plugin) driverFor(e *rollout.Engine, req request, fresh bool) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.drivers[req.key]
	switch {
	case old != nil && old.kind != driveRollout && !old.finished():
		return old
	case old != nil && old.kind == driveRollout && old.config == req.Canonical && !(fresh && old.finished()):
		return old
	}
	return p.startLocked(req, driveRollout, req.Canonical, func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.Drive(ctx, req.Spec, d.record)
	})
}

// rollbackFor returns the driver rolling back req's target, starting one (in place of any other
// driver of the key) unless one is under way.
func (p *Plugin) rollbackFor(e *rollout.Engine, req request) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.drivers[req.key]; old != nil && old.kind == driveRollback && !old.finished() {
		return old
	}
	return p.startRollbackLocked(e, req)
}

// startRollbackLocked starts the rollback of req's target in place of the key's driver. p.mu
// must be held.
func (p *Plugin) startRollbackLocked(e *rollout.Engine, req request) *driver {
	rb := req.Spec.Rollback()
	return p.startLocked(req, driveRollback, "", func(ctx context.Context, d *driver) (rollout.Status, error) {
		return e.DriveAbort(ctx, rb, d.record)
	})
}

// startIdle calls start, with p.mu held, unless a driver of key is under way, and says whether
// it did.
func (p *Plugin) startIdle(key driverKey, start func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.drivers[key]; d != nil && !d.finished() {
		return false
	}
	start()
	return true
}

// forget drops d from the registry, if it is still there.
func (p *Plugin) forget(key driverKey, d *driver) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drivers[key] == d {
		delete(p.drivers, key)
	}
}

// promoteFor starts the full promotion of req's rollout (the Rollout's UID uid) in place of its
// driver, or returns the rollback under way, which goes on.
func (p *Plugin) promoteFor(e *rollout.Engine, req request, uid types.UID) *driver {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.drivers[req.key]; old != nil && old.kind != driveRollout && !old.finished() {
		return old
	}
	return p.startPromoteLocked(e, req, uid)
}

// startPromoteLocked starts the full promotion of req's rollout in place of the key's driver.
// p.mu must be held.
func (p *Plugin) startPromoteLocked(e *rollout.Engine, req request, uid types.UID) *driver {
	return p.startLocked(req, drivePromote, "", func(ctx context.Context, d *driver) (rollout.Status, error) {
		return promote(ctx, e, req, uid, d)
	})
}
