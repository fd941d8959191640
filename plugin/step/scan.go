package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// scanLoop scans at once, then on every tick, until Close.
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

// scan finds the Rollouts with our steps whose target's lock is rolling back for that Rollout,
// and finishes each rollback in a driver; and those fully promoted while their target is still
// held for them (`promote --full` at an Argo pause between two steps, when no step is Running
// for Argo to Terminate), and releases the target as Terminate would. It leaves a target alone
// while a driver of it is under way, and returns how many drivers it started.
func (p *Plugin) scan(ctx context.Context, c Clients) int {
	list, err := c.Rollouts.ArgoprojV1alpha1().Rollouts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("listing Rollouts to find rollbacks cut short", "err", err)
		}
		return 0
	}
	seen := map[driverKey]bool{}
	started := 0
	for i := range list.Items {
		ro := &list.Items[i]
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
			case lock == nil || lock.Holder != req.Holder:
			case lock.Phase == workload.LockRollingBack:
				if p.finishRollback(c.Engine, req) {
					log.Info("finishing a rollback cut short", "rolloutID", lock.RolloutID, "reason", lock.Reason)
					started++
				}
			case lock.Active() && fullyPromoted(ro):
				if p.releaseIdle(c.Engine, req) {
					log.Info("releasing a target still held after the Rollout's full promotion", "rolloutID", lock.RolloutID, "phase", lock.Phase)
					started++
				}
			}
		}
	}
	return started
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

// releaseIdle starts a release driver for req unless a driver of its target is under way, and
// says whether it started one.
func (p *Plugin) releaseIdle(e *rollout.Engine, req request) bool {
	return p.startIdle(req.key, func() { p.startReleaseLocked(e, req) })
}
