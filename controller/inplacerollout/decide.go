package inplacerollout

import (
	"slices"
	"strconv"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Finalizer holds an InPlaceRollout object while its rollout may need a rollback: deleted in
// flight, the object rolls its rollout back first. It is removed once the rollout has ended.
const Finalizer = "inplace-rollout.io/rollback"

// action is the one thing a reconcile of an object does.
type action int

const (
	// actNone: nothing to do until the object changes.
	actNone action = iota
	// actAddFinalizer: a rollout is about to start or goes on; hold the object first.
	actAddFinalizer
	// actRemoveFinalizer: the rollout has ended; nothing is left to roll back.
	actRemoveFinalizer
	// actInvalid: the spec is wrong; say so in the status, change nothing.
	actInvalid
	// actNotStarted: the object is aborted and no rollout of its is in flight: start none.
	actNotStarted
	// actClearAccept: remove an accept annotation that names no paused batch.
	actClearAccept
	// actRollout: the next step of the rollout (accepting a paused batch first when asked).
	actRollout
	// actRollback: the next step of the rollback of the rollout in flight.
	actRollback
)

var actionNames = [...]string{"None", "AddFinalizer", "RemoveFinalizer", "Invalid", "NotStarted", "ClearAccept", "Rollout", "Rollback"}

func (a action) String() string { return actionNames[a] }

// decision is what a reconcile does, and for a rollback who asked for it.
type decision struct {
	action action
	// why says, for actRollback, what stops the rollout: the object was deleted, or aborted.
	why stopReason
}

// stopReason is what stops a rollout before it ends.
type stopReason int

const (
	// stopDeleted: the object was deleted in flight.
	stopDeleted stopReason = iota + 1
	// stopAborted: the object carries the abort annotation.
	stopAborted
)

// decide is what to do with obj, from the object alone: specOK says whether its spec converts
// to a rollout, targetOK whether its target names a workload (the rollback of a deleted or
// aborted object needs only that). The order matters: a deleted object rolls back before
// anything else; the finalizer goes only once the status says the workload was let go, so a
// rollout that stopped for a person (Failed) still rolls back when deleted or aborted; nothing
// starts before the finalizer holds the object.
func decide(obj *v1alpha1.InPlaceRollout, specOK, targetOK bool) decision {
	hold := slices.Contains(obj.Finalizers, Finalizer)
	current := obj.Status.ObservedGeneration == obj.Generation
	deleting := obj.DeletionTimestamp != nil
	switch {
	case deleting && !hold:
		return decision{action: actNone}
	case deleting && (current && released(obj) || !targetOK):
		// Let go, or never started: a target that names no workload holds none.
		return decision{action: actRemoveFinalizer}
	case deleting:
		return decision{action: actRollback, why: stopDeleted}
	case current && released(obj) && hold:
		return decision{action: actRemoveFinalizer}
	case current && released(obj):
		return decision{action: actNone}
	case aborted(obj) && (obj.Status.Phase == "" || released(obj) || !targetOK):
		// Abort stops a rollout in flight; it never undoes one that ended, of this spec or an
		// earlier one.
		return decision{action: actNotStarted}
	case current && stopped(obj) && !aborted(obj):
		return decision{action: actNone}
	case !specOK && !aborted(obj):
		// Said in the status; no finalizer is needed for that.
		return decision{action: actInvalid}
	case !hold:
		return decision{action: actAddFinalizer}
	case aborted(obj):
		return decision{action: actRollback, why: stopAborted}
	case staleAccept(obj):
		return decision{action: actClearAccept}
	}
	return decision{action: actRollout}
}

// released reports whether obj's status, of any generation, says its rollout let the workload
// go: succeeded, rolled back, or released part way.
func released(obj *v1alpha1.InPlaceRollout) bool {
	switch rollout.Phase(obj.Status.Phase) {
	case rollout.PhaseSucceeded, rollout.PhaseRolledBack, rollout.PhaseReleased:
		return true
	}
	return false
}

// stopped reports whether obj's status says its rollout stopped for a person (phase Failed: a
// spec that is wrong or refused, an API error, something blocked, a rollback that could not
// finish), which may still hold the workload: nothing is done until the spec changes, or the
// object is aborted or deleted. A rollout stopped on someone else's change to the template
// (reason TemplateChanged) is looked at still: it goes on once the template has the rollout's
// images again.
func stopped(obj *v1alpha1.InPlaceRollout) bool {
	return rollout.Phase(obj.Status.Phase) == rollout.PhaseFailed && obj.Status.Reason != string(rollout.ReasonTemplateChanged)
}

// inFlight reports whether obj's status, of any generation, says a rollout of its may hold the
// workload.
func inFlight(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Status.Phase != "" && !released(obj)
}

// staleAccept reports whether obj carries an accept annotation that names no batch its rollout
// is paused on: one that was acted on, or set early. It goes, so that it never accepts a later
// pause, of this rollout or the next.
func staleAccept(obj *v1alpha1.InPlaceRollout) bool {
	v, ok := obj.Annotations[v1alpha1.AcceptBatchAnnotation]
	if !ok {
		return false
	}
	p, paused := pauseOf(obj)
	return !paused || v != strconv.Itoa(p.Batch)
}

// aborted reports whether obj carries the abort annotation.
func aborted(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Annotations[v1alpha1.AbortAnnotation] == "true"
}

// template reports whether obj is a spec for Tekton CustomRuns only, which the controller leaves
// alone.
func template(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Annotations[v1alpha1.TemplateAnnotation] == "true"
}
