package step

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// promoteAction is what a full promotion of a Rollout does with its target's lock.
type promoteAction int

const (
	// promoteNone: the target holds no rollout this Rollout runs for its current images.
	promoteNone promoteAction = iota
	// promoteRefuse: the rollout is rolling back, which goes on.
	promoteRefuse
	// promoteDrive: the rollout goes to every pod at once, in place.
	promoteDrive
)

// decidePromote decides what Argo's full promotion of the Rollout that req was read from (UID
// uid) does with lock, and says why in words. Only the rollout this very Rollout runs to its
// current images is promoted: a lock of a deleted Rollout of the same name, or of other images,
// is not this Rollout's to hand back.
func decidePromote(lock *workload.Lock, req request, uid types.UID) (promoteAction, string) {
	target := req.key.target
	switch {
	case lock == nil:
		return promoteNone, fmt.Sprintf("no in-place rollout of %s is recorded; nothing to promote", target)
	case lock.Holder != req.Holder:
		return promoteNone, fmt.Sprintf("rollout %s of %s is %s's; nothing to promote", lock.RolloutID, target, lock.Holder)
	case !lock.HeldBy(req.Holder, uid):
		return promoteNone, fmt.Sprintf("rollout %s of %s was started by an earlier Rollout %s, deleted since; nothing to promote", lock.RolloutID, target, req.Rollout)
	case lock.Phase == workload.LockRollingBack:
		return promoteRefuse, fmt.Sprintf("%s is rolling back (%s); the rollback goes on", target, lock.Reason)
	case lock.Phase == workload.LockSucceeded && lock.SpecHash == req.Spec.Hash():
		return promoteNone, fmt.Sprintf("rollout %s of %s succeeded", lock.RolloutID, target)
	case lock.Phase != workload.LockProgressing && lock.Phase != workload.LockHolding && lock.Phase != workload.LockPaused:
		return promoteNone, fmt.Sprintf("rollout %s of %s is %s; nothing to promote", lock.RolloutID, target, lock.Phase)
	case lock.SpecHash != req.Spec.Hash():
		return promoteNone, fmt.Sprintf("rollout %s of %s is to other images than the Rollout's; nothing to promote", lock.RolloutID, target)
	}
	return promoteDrive, ""
}

// promotion is spec as Argo's full promotion asks for it: every remaining pod in one batch,
// in place, maxUnavailable at a time, with no soak, analysis or hold point. The workload is never
// handed back with pods on other images than its template, which its controller would recreate.
func promotion(spec rollout.Spec) rollout.Spec {
	spec.Batches = []intstr.IntOrString{intstr.FromString("100%")}
	spec.UpTo, spec.Analysis, spec.Soak = nil, nil, 0
	return spec
}

// promote drives req's rollout to every pod, in place, when decidePromote says so; a batch
// paused on an inconclusive analysis is accepted, as Argo's promotion accepts everything.
func promote(ctx context.Context, e *rollout.Engine, req request, uid types.UID, d *driver) (rollout.Status, error) {
	lock, err := e.Lock(ctx, req.Spec.Target)
	if err != nil {
		return rollout.Status{}, err
	}
	action, msg := decidePromote(lock, req, uid)
	switch action {
	case promoteNone:
		return rollout.Status{Message: msg}, nil
	case promoteRefuse:
		return rollout.Status{Phase: rollout.PhaseRollingBack, RolloutID: lock.RolloutID}, &rollout.InvalidError{Msg: msg}
	}
	spec := promotion(req.Spec)
	st, err := e.Drive(ctx, spec, d.record)
	if pause, ok := rollout.PauseOf(st); ok && err == nil {
		return e.AcceptAndDrive(ctx, spec, pause, d.record)
	}
	return st, err
}
