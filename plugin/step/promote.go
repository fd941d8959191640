package step

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// promoteAction is what a full promotion of a Rollout does with its target's rollout.
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
// uid) does with rec, the rollout its target records, and says why in words. Only the rollout
// this very Rollout runs to its current images is promoted: one of a deleted Rollout of the same
// name, or of other images, is not this Rollout's to hand back.
func decidePromote(rec *rollout.Record, req request, uid types.UID) (promoteAction, string) {
	target := req.key.Target
	switch {
	case rec == nil:
		return promoteNone, fmt.Sprintf("no in-place rollout of %s is recorded; nothing to promote", target)
	case rec.Holder != req.Holder:
		return promoteNone, fmt.Sprintf("rollout %s of %s is %s's; nothing to promote", rec.RolloutID, target, rec.Holder)
	case !rec.HeldBy(req.Holder, uid):
		return promoteNone, fmt.Sprintf("rollout %s of %s was started by an earlier Rollout %s, deleted since; nothing to promote", rec.RolloutID, target, req.Rollout)
	case rec.Phase == rollout.PhaseRollingBack:
		return promoteRefuse, fmt.Sprintf("%s is rolling back (%s); the rollback goes on", target, rec.Message)
	case rec.Phase == rollout.PhaseSucceeded && rec.SpecHash == req.Spec.Hash():
		return promoteNone, fmt.Sprintf("rollout %s of %s succeeded", rec.RolloutID, target)
	case rec.Phase != rollout.PhaseProgressing && rec.Phase != rollout.PhaseHolding && rec.Phase != rollout.PhasePaused:
		return promoteNone, fmt.Sprintf("rollout %s of %s is %s; nothing to promote", rec.RolloutID, target, rec.Phase)
	case rec.SpecHash != req.Spec.Hash():
		return promoteNone, fmt.Sprintf("rollout %s of %s is to other images than the Rollout's; nothing to promote", rec.RolloutID, target)
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
func promote(ctx context.Context, e *rollout.Driver, req request, uid types.UID, d *driver) (rollout.Status, error) {
	rec, err := e.Record(ctx, req.Spec.Target)
	if err != nil {
		return rollout.Status{}, err
	}
	action, msg := decidePromote(rec, req, uid)
	switch action {
	case promoteNone:
		return rollout.Status{Message: msg}, nil
	case promoteRefuse:
		return rollout.Status{Phase: rollout.PhaseRollingBack, RolloutID: rec.RolloutID}, &rollout.InvalidError{Msg: msg}
	}
	spec := promotion(req.Spec)
	st, err := e.Drive(ctx, spec, d.OnStatus)
	if pause, ok := rollout.PauseOf(st); ok && err == nil {
		return e.AcceptAndDrive(ctx, spec, pause, d.OnStatus)
	}
	return st, err
}
