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
	req, err := decode(ro, c)
	if err != nil {
		// A config that never decoded never started a rollout: nothing to undo.
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to roll back: " + err.Error()}, types.RpcError{}
	}
	if req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "the Rollout's first revision: nothing to roll back"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.rollbackFor(cl.Engine, req)
	<-d.done
	st, err := d.final, d.err
	target := req.Spec.Target
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %v", req.Rollout, target, err)}, types.RpcError{}
	}
	if st.Phase != rollout.PhaseRolledBack {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: rolling back %s: %s", req.Rollout, target, outcomeMessage(st))}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: outcomeMessage(st)}, types.RpcError{}
}

// Terminate stops the step's rollout where it is and releases the target (Argo calls it on full
// promotion): pods mid-update finish, no other pod starts, and the workload is handed back with
// its update strategy, its template and its pods as they are (rollout.Engine.Release). It waits
// for that at most TerminateWait, then reports Successful with what remains under way, or Failed
// with the reason; a rollback under way goes on.
func (p *Plugin) Terminate(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	req, err := decode(ro, c)
	if err != nil || req.Initial {
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to stop"}, types.RpcError{}
	}
	cl, err := p.getClients()
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	d := p.releaseFor(cl.Engine, req)
	if d.kind == driveRollback {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: %s is rolling back; the rollback goes on, and %s is handed back when it ends",
			req.Rollout, req.key.target, req.key.target)}, types.RpcError{}
	}
	wait := p.opts.TerminateWait
	if wait <= 0 {
		wait = DefaultTerminateWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.done:
	case <-t.C:
		st := d.status()
		return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("stopped: %d pods of %s finish their update, no other starts, and then %s is handed back as it is",
			st.Updating, req.key.target, req.key.target)}, types.RpcError{}
	}
	if d.err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: releasing %s: %v", req.Rollout, req.key.target, d.err)}, types.RpcError{}
	}
	if d.final.Phase == rollout.PhaseProgressing {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s: %s is not released: %s", req.Rollout, req.key.target, d.final.Message)}, types.RpcError{}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: d.final.Message}, types.RpcError{}
}
