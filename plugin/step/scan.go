package step

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoinformers "github.com/argoproj/argo-rollouts/pkg/client/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
)

// watchDeletions tells the scan loop of every Rollout deleted, through an informer of the
// Rollouts (client-go's list and watch, with its reconnects), until Close.
func (p *Plugin) watchDeletions(c Clients) {
	inf := argoinformers.NewSharedInformerFactory(c.Rollouts, 0).Argoproj().V1alpha1().Rollouts().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		select {
		case p.deleted <- struct{}{}:
		default:
			// A scan is due already; it sees every deletion so far.
		}
	}})
	if err != nil {
		// Only a stopped informer refuses a handler; the periodic scan still finds deletions.
		p.log.Warn("watching Rollout deletions", "err", err)
		return
	}
	go inf.Run(p.ctx.Done())
}

// scanLoop scans at once, then on every tick and every Rollout deletion, until Close.
func (p *Plugin) scanLoop(c Clients) {
	defer close(p.scanDone)
	ticks := p.opts.Ticks
	if ticks == nil {
		every := p.opts.ScanInterval
		if every <= 0 {
			every = DefaultScanInterval
		}
		t := time.NewTicker(every)
		defer t.Stop()
		ticks = t.C
	}
	for {
		n := p.scan(p.ctx, c)
		if p.afterScan != nil {
			p.afterScan(n)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-ticks:
		case <-p.deleted:
		}
	}
}

// configAt is a config of ours in a Rollout, and where it is.
type configAt struct {
	field string
	raw   json.RawMessage
}

// ourConfigs are the Rollout's step configs of this plugin. The traffic router's are not: Argo
// calls the router on every reconcile of the Rollout, aborted or not, and the router finishes its
// own rollbacks from there; this process finishing them too would run two rollbacks of one
// target at once, from two processes.
func ourConfigs(ro *argov1alpha1.Rollout) []configAt {
	canary := ro.Spec.Strategy.Canary
	if canary == nil {
		return nil
	}
	var out []configAt
	for i, s := range canary.Steps {
		if s.Plugin != nil && s.Plugin.Name == Name {
			out = append(out, configAt{fmt.Sprintf("steps[%d].plugin.config", i), s.Plugin.Config})
		}
	}
	return out
}

// scan finds the rollouts this plugin must finish for Rollouts that cannot ask: the rollbacks of
// Rollouts whose Abort was cut short (after its rollback started, or before), the rollouts of Rollouts fully promoted while their target
// was still held for them (promote --full at an Argo pause between two steps, when no step is
// Running for Argo to Terminate), and the rollouts of Rollouts that were deleted (see orphans).
// It leaves a target alone while a driver of it is under way, except the rollout driver of a
// deleted Rollout, which its rollback replaces, and returns how many drivers it started.
func (p *Plugin) scan(ctx context.Context, c Clients) int {
	// The locks first, then the Rollouts: a lock listed was written by a Rollout that existed
	// before the Rollouts are listed, so one missing from the list was deleted.
	locks, lockErr := workload.ListLocks(ctx, c.Engine.Client, metav1.NamespaceAll, argospec.HolderPrefix)
	if lockErr != nil && ctx.Err() == nil {
		p.log.Warn("listing the workloads held for Argo Rollouts, to find those of deleted Rollouts", "err", lockErr)
	}
	list, err := c.Rollouts.ArgoprojV1alpha1().Rollouts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("listing Rollouts to find rollbacks cut short", "err", err)
		}
		return 0
	}
	seen := map[driverKey]bool{}
	rollouts := map[string]types.UID{}
	started := 0
	for i := range list.Items {
		ro := &list.Items[i]
		rollouts[argospec.Holder(ro)] = ro.UID
		for _, cfg := range ourConfigs(ro) {
			req, err := decodeAt(ro, cfg.raw, cfg.field)
			if err != nil || seen[req.key] {
				// A config that does not decode never started a rollout: Run reports it.
				continue
			}
			seen[req.key] = true
			log := p.log.With(append([]any{"rollout", req.Rollout}, rollout.LogAttrs(req.Spec.Target)...)...)
			lock, err := c.Engine.Lock(ctx, req.Spec.Target)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("reading the rollout lock to find a rollback cut short", "err", err)
				}
				continue
			}
			switch {
			case lock == nil || !lock.HeldBy(req.Holder, ro.UID):
				// Another holder's, or a deleted Rollout's of the same name: see orphans.
			case lock.Phase == workload.LockRollingBack:
				if p.finishRollback(c.Engine, req) {
					log.Info("finishing a rollback cut short", "rolloutID", lock.RolloutID, "reason", lock.Reason)
					started++
				}
			case ro.Status.Abort && lock.Active():
				// Argo calls Abort once: a process killed before that call's rollback wrote its
				// first step leaves the lock as the rollout had it, and nothing asks again.
				if p.finishRollback(c.Engine, req) {
					log.Info("rolling back for an aborted Rollout whose Abort call was cut short", "rolloutID", lock.RolloutID, "phase", lock.Phase)
					started++
				}
			case fullyPromoted(ro):
				if action, _ := decidePromote(lock, req, ro.UID); action == promoteDrive && p.promoteIdle(c.Engine, req, ro.UID) {
					log.Info("promoting a rollout still held after the Rollout's full promotion", "rolloutID", lock.RolloutID, "phase", lock.Phase)
					started++
				}
			}
		}
	}
	for _, h := range orphans(locks, rollouts) {
		req := orphanRequest(h)
		if p.rollBackOrphan(c.Engine, req, h.Lock) {
			p.log.Warn("rolling back the rollout of a deleted Rollout", append([]any{"rollout", req.Rollout, "rolloutID", h.Lock.RolloutID,
				"phase", h.Lock.Phase, "holderUID", h.Lock.HolderUID}, rollout.LogAttrs(h.Ref)...)...)
			started++
		}
	}
	return started
}

// orphans are the locks, of Argo holders still holding a workload, whose Rollout no longer
// exists: none of its name (rollouts maps each Rollout's holder to its UID), or one of another
// UID than the lock records (deleted and created again). Nobody would ever finish or roll back
// their rollouts but this plugin.
func orphans(locks []workload.HeldLock, rollouts map[string]types.UID) []workload.HeldLock {
	var out []workload.HeldLock
	for _, h := range locks {
		uid, ok := rollouts[h.Lock.Holder]
		if !h.Lock.Active() || ok && h.Lock.HeldBy(h.Lock.Holder, uid) {
			continue
		}
		out = append(out, h)
	}
	return out
}

// orphanRequest is the request of the deleted Rollout that holds h, as far as a rollback needs
// one: the target, the holder, and the defaults' pace (the Rollout's own config is gone).
func orphanRequest(h workload.HeldLock) request {
	name := strings.TrimPrefix(h.Lock.Holder, argospec.HolderPrefix)
	spec := rollout.Spec{Target: h.Ref, Holder: h.Lock.Holder, HolderUID: h.Lock.HolderUID,
		MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}
	return request{Request: argospec.Request{Rollout: name, Holder: h.Lock.Holder, Spec: spec},
		key: driverKey{holder: h.Lock.Holder, target: h.Ref.String()}}
}

// rollBackOrphan starts the rollback of the rollout a deleted Rollout left (req, from
// orphanRequest, of the lock seen), unless a rollback or promotion of the target is under way. It
// replaces the deleted Rollout's rollout driver, which would go on updating pods for nobody. The
// rollback goes on only while the lock is the one seen: still holding the workload for that
// holder (a stale list could show a rollout that ended since).
func (p *Plugin) rollBackOrphan(e *rollout.Engine, req request, seen *workload.Lock) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.drivers[req.key]; d != nil && d.kind != driveRollout && !d.finished() {
		return false
	}
	rb := req.Spec.Rollback()
	p.startLocked(req, driveRollback, "", func(ctx context.Context, d *driver) (rollout.Status, error) {
		lock, err := e.Lock(ctx, rb.Target)
		if err != nil {
			return rollout.Status{}, err
		}
		if !lock.Active() || lock.Holder != seen.Holder || lock.HolderUID != seen.HolderUID {
			return rollout.Status{Message: "the rollout of the deleted Rollout ended before its rollback began"}, nil
		}
		return e.DriveAbort(ctx, rb, d.record)
	})
	return true
}

// finishRollback starts a rollback driver for req unless a driver of its target is under way,
// and says whether it started one.
func (p *Plugin) finishRollback(e *rollout.Engine, req request) bool {
	return p.startIdle(req.key, func() { p.startRollbackLocked(e, req) })
}

// fullyPromoted reports whether the Rollout's current revision is its stable one: Argo has
// nothing left to run or terminate for it.
func fullyPromoted(ro *argov1alpha1.Rollout) bool {
	return ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
}

// promoteIdle starts the full promotion of req's rollout (the Rollout's UID uid) unless a driver
// of its target is under way, and says whether it started one.
func (p *Plugin) promoteIdle(e *rollout.Engine, req request, uid types.UID) bool {
	return p.startIdle(req.key, func() { p.startPromoteLocked(e, req, uid) })
}
