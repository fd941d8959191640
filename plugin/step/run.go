package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
)

// request is a decoded call: the Rollout's step config as the engine's spec, and the driver
// that runs it.
type request struct {
	argospec.Request
	key driverKey
}

// configField is where a step's config is, for messages.
const configField = "steps[].plugin.config"

// decode reads the call's Rollout and step config. Its error is bad input, named by field, and
// nothing is written for it.
func decode(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (request, error) {
	var raw json.RawMessage
	if c != nil {
		raw = c.Config
	}
	return decodeAt(ro, raw, configField)
}

// decodeAt reads the config raw found at field of the Rollout ro. A step's rollout supersedes
// the Rollout's rollout in flight: Argo restarts the steps on a template change with no Abort,
// and the newest images win.
func decodeAt(ro *argov1alpha1.Rollout, raw json.RawMessage, field string) (request, error) {
	r, err := argospec.Decode(ro, raw, field)
	if err != nil {
		return request{Request: r}, err
	}
	r.Spec.Supersede = true
	return request{Request: r, key: driverKey{holder: r.Holder, target: r.Spec.Target.String()}}, nil
}

// Run starts the rollout of the step's config, or finds its driver, and reports at once where it
// is: Running while it moves, Successful once it succeeded or holds at its upTo, Failed when it
// rolled back, failed or its config is wrong. Trouble that may pass is an RpcError, which Argo
// retries; never Phase Error, which would wedge the step. While the target's rollback or promotion
// is under way, Run waits for it (Running) rather than stop it.
func (p *Plugin) Run(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil {
		msg := err.Error()
		if req.Initial {
			msg += "; Argo completes a Rollout's first revision whatever its steps return, so nothing was rolled out in place, and this step fails at every later revision until its config is fixed"
		}
		p.recordInvalidConfig(ro, msg)
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: msg}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful,
			Message: "the Rollout's first revision: there is nothing to roll out in place"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{}, types.RpcError{ErrorString: err.Error()}
	}
	// A step started afresh (Argo resets the step status on a new revision and on a retry)
	// re-observes the cluster rather than trusting a finished driver's verdict.
	fresh := c == nil || len(c.Status) == 0 || string(c.Status) == "null"
	d := p.driverFor(cl.Engine, req, fresh)
	if d.kind != driveRollout {
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: fmt.Sprintf("waiting for the %s of %s to end first: %s", d.kind, req.key.target, runningMessage(st))}, types.RpcError{}
	}
	if !d.finished() {
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: runningMessage(st)}, types.RpcError{}
	}
	if lock := p.earlierRollout(cl.Engine, req, ro, d); lock != nil {
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter,
			Message: fmt.Sprintf("rolling back rollout %s of %s first: an earlier Rollout %s, deleted since, left it %s; this Rollout's rollout starts once it is rolled back",
				lock.RolloutID, req.key.target, req.Rollout, lock.Phase)}, types.RpcError{}
	}
	return p.verdict(req, d)
}

// earlierRollout finds, when the rollout driver d was refused because another holder holds the
// target, whether that holder is an earlier Rollout of the same name (deleted, and ro created
// again since); it then starts the rollback of that rollout, as the scan would, and returns its
// lock. This Rollout waits for it rather than fail: the lock is no one's but this plugin's to
// undo, and the scan may not run before Argo gives up on the step.
func (p *Plugin) earlierRollout(e *rollout.Engine, req request, ro *argov1alpha1.Rollout, d *driver) *workload.Lock {
	var inv *rollout.InvalidError
	if !errors.As(d.err, &inv) || inv.Fix != rollout.FixTakeOver {
		return nil
	}
	lock, err := e.Lock(context.Background(), req.Spec.Target)
	if err != nil || !lock.Active() || lock.Holder != req.Holder || lock.HeldBy(req.Holder, ro.UID) {
		return nil
	}
	h := workload.HeldLock{Ref: req.Spec.Target, Lock: lock}
	if p.rollBackOrphan(e, orphanRequest(h), lock) {
		p.log.Warn("rolling back the rollout of a deleted Rollout of the same name", append([]any{"rollout", req.Rollout, "rolloutID", lock.RolloutID,
			"phase", lock.Phase, "holderUID", lock.HolderUID}, rollout.LogAttrs(req.Spec.Target)...)...)
	}
	return lock
}

// verdict maps a finished driver's outcome to Argo's phases.
func (p *Plugin) verdict(req request, d *driver) (types.RpcStepResult, types.RpcError) {
	st, err := d.final, d.err
	if err != nil {
		if rollout.Retryable(err) {
			// The next Run starts a new driver, which goes on from the cluster.
			p.forget(req.key, d)
			return types.RpcStepResult{}, types.RpcError{ErrorString: fmt.Sprintf("Rollout %s: %v", req.Rollout, err)}
		}
		return types.RpcStepResult{Phase: types.PhaseFailed, Status: stepStatus(st),
			Message: fmt.Sprintf("Rollout %s: %v", req.Rollout, err)}, types.RpcError{}
	}
	res := types.RpcStepResult{Status: stepStatus(st), Message: outcomeMessage(st)}
	switch st.Phase {
	case rollout.PhaseSucceeded, rollout.PhaseHolding:
		res.Phase = types.PhaseSuccessful
	case rollout.PhasePaused:
		// A person accepts the batch or aborts the Rollout; the next Run looks again.
		p.forget(req.key, d)
		res.Phase, res.RequeueAfter = types.PhaseRunning, RequeueAfter
	default:
		res.Phase = types.PhaseFailed
	}
	return res, types.RpcError{}
}

// eventTimeout bounds the recording of an Event in a call, which holds a controller worker.
const eventTimeout = 5 * time.Second

// eventComponent is the source of the plugin's Events.
const eventComponent = "inplace-rollout-step"

// recordInvalidConfig puts msg on the Rollout as a Warning Event, once per generation of the
// Rollout. Argo owns the Rollout's status and conditions, and on the Rollout's first revision it
// goes Healthy whatever Run returns: the step's Failed status alone is easily missed, while
// `kubectl describe rollout` lists the Rollout's Events. A failure to record is logged: the
// verdict stands without it.
func (p *Plugin) recordInvalidConfig(ro *argov1alpha1.Rollout, msg string) {
	if ro == nil {
		return
	}
	log := p.log.With("rollout", ro.Namespace+"/"+ro.Name)
	cl, err := p.getClients()
	if err != nil {
		log.Warn("invalid config, not recorded as an Event", "config", msg, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, eventTimeout)
	defer cancel()
	created, err := argospec.RecordOnce(ctx, cl.Engine.Client, ro, eventComponent, argospec.EventInvalidConfig, msg)
	switch {
	case err != nil:
		log.Warn("invalid config, not recorded as an Event", "config", msg, "err", err)
	case created:
		log.Warn("invalid config, recorded as an Event on the Rollout", "config", msg)
	}
}
