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
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
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
	recs, lockErr := c.Driver.ListRecords(ctx, metav1.NamespaceAll, argospec.HolderPrefix)
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
	seen := map[drivers.Key]bool{}
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
			rec, err := c.Driver.Record(ctx, req.Spec.Target)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("reading the rollout lock to find a rollback cut short", "err", err)
				}
				continue
			}
			switch {
			case rec == nil || !rec.HeldBy(req.Holder, ro.UID):
				// Another holder's, or a deleted Rollout's of the same name: see orphans.
			case rec.Phase == rollout.PhaseRollingBack:
				if p.finishRollback(c.Driver, req) {
					log.Info("finishing a rollback cut short", "rolloutID", rec.RolloutID, "reason", rec.Message)
					started++
				}
			case ro.Status.Abort && rec.Active():
				// Argo calls Abort once: a process killed before that call's rollback wrote its
				// first step leaves the lock as the rollout had it, and nothing asks again.
				if p.finishRollback(c.Driver, req) {
					log.Info("rolling back for an aborted Rollout whose Abort call was cut short", "rolloutID", rec.RolloutID, "phase", rec.Phase)
					started++
				}
			case fullyPromoted(ro):
				if action, _ := decidePromote(rec, req, ro.UID); action == promoteDrive && p.promoteIdle(c.Driver, req, ro.UID) {
					log.Info("promoting a rollout still held after the Rollout's full promotion", "rolloutID", rec.RolloutID, "phase", rec.Phase)
					started++
				}
			}
		}
	}
	for _, rec := range orphans(recs, rollouts) {
		req := orphanRequest(rec)
		if p.rollBackOrphan(c.Driver, req, &rec) {
			p.log.Warn("rolling back the rollout of a deleted Rollout", append([]any{"rollout", req.Rollout, "rolloutID", rec.RolloutID,
				"phase", rec.Phase, "holderUID", rec.HolderUID}, rollout.LogAttrs(rec.Target)...)...)
			started++
		}
	}
	return started
}

// orphans are the records, of Argo holders still holding a workload, whose Rollout no longer
// exists: none of its name (rollouts maps each Rollout's holder to its UID), or one of another
// UID than the record says (deleted and created again). Nobody would ever finish or roll back
// their rollouts but this plugin.
func orphans(recs []rollout.Record, rollouts map[string]types.UID) []rollout.Record {
	var out []rollout.Record
	for _, rec := range recs {
		uid, ok := rollouts[rec.Holder]
		if !rec.Active() || ok && rec.HeldBy(rec.Holder, uid) {
			continue
		}
		out = append(out, rec)
	}
	return out
}

// orphanRequest is the request of the deleted Rollout that holds rec's target, as far as a
// rollback needs one: the target, the holder, and the defaults' pace (the Rollout's own config is
// gone).
func orphanRequest(rec rollout.Record) request {
	name := strings.TrimPrefix(rec.Holder, argospec.HolderPrefix)
	spec := rollout.Spec{Target: rec.Target, Holder: rec.Holder, HolderUID: rec.HolderUID,
		MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}
	return request{Request: argospec.Request{Rollout: name, Holder: rec.Holder, Spec: spec}, key: drivers.KeyOf(spec)}
}

// rollBackOrphan starts the rollback of the rollout a deleted Rollout left (req, from
// orphanRequest, of the record seen), unless a rollback or promotion of the target is under way.
// It replaces the deleted Rollout's rollout driver, which would go on updating pods for nobody.
// The rollback goes on only while the record is the one seen: still holding the workload for
// that holder (a stale list could show a rollout that ended since).
func (p *Plugin) rollBackOrphan(e *rollout.Driver, req request, seen *rollout.Record) bool {
	rb := req.Spec.Rollback()
	_, started := p.start(req, driveRollback, "", busyElse, func(ctx context.Context, d *driver) (rollout.Status, error) {
		rec, err := e.Record(ctx, rb.Target)
		if err != nil {
			return rollout.Status{}, err
		}
		if !rec.Active() || rec.Holder != seen.Holder || rec.HolderUID != seen.HolderUID {
			return rollout.Status{Message: "the rollout of the deleted Rollout ended before its rollback began"}, nil
		}
		return e.DriveAbort(ctx, rb, d.OnStatus)
	})
	return started
}

// fullyPromoted reports whether the Rollout's current revision is its stable one: Argo has
// nothing left to run or terminate for it.
func fullyPromoted(ro *argov1alpha1.Rollout) bool {
	return ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
}
