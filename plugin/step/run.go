package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/argospec"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
)

// request is a decoded call: the Rollout's step config as the engine's spec, and the driver
// that runs it.
type request struct {
	argospec.Request
	key drivers.Key
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
	return request{Request: r, key: drivers.KeyOf(r.Spec)}, nil
}

// Run starts the rollout of the step's config, or finds its driver, and reports at once where it
// is: Running while it moves, Successful once it succeeded or holds at its upTo, Failed when it
// rolled back, failed or its config is wrong. Trouble that may pass is an RpcError, which Argo
// retries; never Phase Error, which would wedge the step. While the target's rollback or promotion
// is under way, Run waits for it (Running) rather than stop it.
func (p *Plugin) Run(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	ro, err := p.withStoredResources(ro, c)
	if err != nil {
		return types.RpcStepResult{}, types.RpcError{ErrorString: err.Error()}
	}
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
	cl, err := p.clients.Get()
	if err != nil {
		return types.RpcStepResult{}, types.RpcError{ErrorString: err.Error()}
	}
	// A step started afresh (Argo resets the step status on a new revision and on a retry)
	// re-observes the cluster rather than trusting a finished driver's verdict.
	fresh := c == nil || len(c.Status) == 0 || string(c.Status) == "null"
	d := p.driverFor(cl.Driver, req, fresh)
	if d.Job.kind != driveRollout {
		st := d.Status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: fmt.Sprintf("waiting for the %s of %s to end first: %s", d.Job.kind, req.key.Target, rollout.Summary(st))}, types.RpcError{}
	}
	if !d.Finished() {
		st := d.Status()
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st),
			Message: rollout.Summary(st)}, types.RpcError{}
	}
	if rec := p.earlierRollout(cl.Driver, req, ro, d); rec != nil {
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter,
			Message: fmt.Sprintf("rolling back rollout %s of %s first: an earlier Rollout %s, deleted since, left it %s; this Rollout's rollout starts once it is rolled back",
				rec.RolloutID, req.key.Target, req.Rollout, rec.Phase)}, types.RpcError{}
	}
	return p.verdict(req, d)
}

// earlierRollout finds, when the rollout driver d was refused because another holder holds the
// target, whether that holder is an earlier Rollout of the same name (deleted, and ro created
// again since); it then starts the rollback of that rollout, as the scan would, and returns its
// record. This Rollout waits for it rather than fail: the lock is no one's but this plugin's to
// undo, and the scan may not run before Argo gives up on the step.
func (p *Plugin) earlierRollout(e *rollout.Driver, req request, ro *argov1alpha1.Rollout, d *driver) *rollout.Record {
	if o := d.Outcome(); o.Kind != rollout.BadInput || o.Fix != rollout.FixTakeOver {
		return nil
	}
	rec, err := e.Record(context.Background(), req.Spec.Target)
	if err != nil || !rec.Active() || rec.Holder != req.Holder || rec.HeldBy(req.Holder, ro.UID) {
		return nil
	}
	if p.rollBackOrphan(e, orphanRequest(*rec), rec) {
		p.log.Warn("rolling back the rollout of a deleted Rollout of the same name", append([]any{"rollout", req.Rollout, "rolloutID", rec.RolloutID,
			"phase", rec.Phase, "holderUID", rec.HolderUID}, rollout.LogAttrs(req.Spec.Target)...)...)
	}
	return rec
}

// verdict maps a finished driver's outcome to Argo's phases.
func (p *Plugin) verdict(req request, d *driver) (types.RpcStepResult, types.RpcError) {
	st, _ := d.Result()
	res, rpcErr, forget := stepVerdict(req.Rollout, st, d.Outcome())
	if forget {
		// The next Run starts a new driver: it goes on from the cluster, or looks again at a
		// pause a person may have accepted.
		p.drivers.Forget(req.key, d)
	}
	return res, rpcErr
}

// stepVerdict is the step's answer for the driver of Rollout name that ended with st, as o says,
// and whether to forget that driver. Trouble that may pass is an RpcError, which Argo retries;
// never Phase Error, which would wedge the step.
func stepVerdict(name string, st rollout.Status, o rollout.Outcome) (types.RpcStepResult, types.RpcError, bool) {
	switch o.Kind {
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		return types.RpcStepResult{}, types.RpcError{ErrorString: fmt.Sprintf("Rollout %s: %v", name, o.Err)}, true
	case rollout.BadInput, rollout.Refused, rollout.Blocked, rollout.Superseded:
		return types.RpcStepResult{Phase: types.PhaseFailed, Status: stepStatus(st), Message: fmt.Sprintf("Rollout %s: %v", name, o.Err)}, types.RpcError{}, false
	case rollout.Succeeded, rollout.Holding:
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Status: stepStatus(st), Message: outcomeMessage(st)}, types.RpcError{}, false
	case rollout.Paused:
		// A person accepts the batch or aborts the Rollout; the next Run looks again.
		return types.RpcStepResult{Phase: types.PhaseRunning, RequeueAfter: RequeueAfter, Status: stepStatus(st), Message: outcomeMessage(st)}, types.RpcError{}, true
	}
	// Rolled back, stopped for a person, or ended short of a verdict.
	return types.RpcStepResult{Phase: types.PhaseFailed, Status: stepStatus(st), Message: outcomeMessage(st)}, types.RpcError{}, false
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
	cl, err := p.clients.Get()
	if err != nil {
		log.Warn("invalid config, not recorded as an Event", "config", msg, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, eventTimeout)
	defer cancel()
	created, err := argospec.RecordOnce(ctx, cl.Driver.Client, ro, eventComponent, argospec.EventInvalidConfig, msg)
	switch {
	case err != nil:
		log.Warn("invalid config, not recorded as an Event", "config", msg, "err", err)
	case created:
		log.Warn("invalid config, recorded as an Event on the Rollout", "config", msg)
	}
}
