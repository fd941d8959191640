package step

import (
	"fmt"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Abort rolls back every pod the step's rollout touched, within the call (Argo never calls
// Abort again, and turns a Running answer into Failed): Successful once rolled back, Failed with
// the reason otherwise. A rollback of the target already under way (the scan's) is joined.
func (p *Plugin) Abort(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	// Argo calls it once: a template not read again is used as Argo sent it.
	if stored, err := p.withStoredResources(ro, c); err == nil {
		ro = stored
	}
	req, err := decode(ro, c)
	if err != nil {
		// A config that never decoded never started a rollout: nothing to undo.
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to roll back: " + err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "the Rollout's first revision: nothing to roll back"}, types.RpcError{}
	}
	cl, err := p.clients.Get()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.rollbackFor(cl.Driver, req)
	st, err := d.Wait()
	target := req.Spec.Target
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %v", req.Rollout, target, err)}, types.RpcError{}
	}
	if st.Phase != rollout.PhaseRolledBack {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %s", req.Rollout, target, outcomeMessage(st))}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: outcomeMessage(st)}, types.RpcError{}
}

// Terminate is Argo's full promotion of a Rollout whose step is Running: the step's rollout goes
// to every remaining pod at once, in place, maxUnavailable at a time, with no soak, analysis or
// hold point, and then the workload is handed back with its template on the images every pod
// runs (no pod is left for its controller to recreate). It waits for that at most TerminateWait,
// then reports Successful with what goes on in the background, or Failed with the reason; a
// rollback under way goes on.
func (p *Plugin) Terminate(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	// Argo calls it once: a template not read again is used as Argo sent it.
	if stored, err := p.withStoredResources(ro, c); err == nil {
		ro = stored
	}
	req, err := decode(ro, c)
	if err != nil || req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to promote"}, types.RpcError{}
	}
	cl, err := p.clients.Get()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.promoteFor(cl.Driver, req, ro.UID)
	if d.Job.kind == driveRollback {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: %s is rolling back; the rollback goes on, and %s is handed back when it ends",
			req.Rollout, req.key.Target, req.key.Target)}, types.RpcError{}
	}
	wait := p.opts.TerminateWait
	if wait <= 0 {
		wait = DefaultTerminateWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.Done():
	case <-t.C:
		st := d.Status()
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("promoted: the remaining pods of %s are updated in place, %d of %d so far, with no soak or analysis; then %s is handed back",
			req.key.Target, st.Updated, st.Total, req.key.Target)}, types.RpcError{}
	}
	st, err := d.Result()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: promoting %s: %v", req.Rollout, req.key.Target, err)}, types.RpcError{}
	}
	switch st.Phase {
	case "", rollout.PhaseSucceeded:
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: outcomeOrMessage(st)}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: promoting %s: %s", req.Rollout, req.key.Target, outcomeMessage(st))}, types.RpcError{}
}

// outcomeOrMessage is the outcome of a driver that ran, or only its message when it had nothing
// to do.
func outcomeOrMessage(st rollout.Status) string {
	if st.Phase == "" {
		return st.Message
	}
	return outcomeMessage(st)
}
