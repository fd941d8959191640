package inplacerollout

import (
	"slices"

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
	// actRollout: the next step of the rollout (accepting a paused batch first when asked).
	actRollout
	// actRollback: the next step of the rollback of the rollout in flight.
	actRollback
)

var actionNames = [...]string{"None", "AddFinalizer", "RemoveFinalizer", "Invalid", "NotStarted", "Rollout", "Rollback"}

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
// to a rollout. The order matters: a deleted object rolls back before anything else; a held
// object whose rollout ended lets go; nothing starts before the finalizer holds the object.
func decide(obj *v1alpha1.InPlaceRollout, specOK bool) decision {
	hold := slices.Contains(obj.Finalizers, Finalizer)
	settled := settled(obj)
	switch {
	case obj.DeletionTimestamp != nil && !hold:
		return decision{action: actNone}
	case obj.DeletionTimestamp != nil && (settled || !specOK):
		// An invalid spec names no workload to roll back: its rollout, if any, was the
		// previous spec's, which a person rolls back (the status said so).
		return decision{action: actRemoveFinalizer}
	case obj.DeletionTimestamp != nil:
		return decision{action: actRollback, why: stopDeleted}
	case settled && hold:
		return decision{action: actRemoveFinalizer}
	case settled:
		return decision{action: actNone}
	case !specOK:
		return decision{action: actInvalid}
	case aborted(obj) && !inFlight(obj):
		// Abort stops a rollout in flight; it never undoes one that ended, of this spec or an
		// earlier one.
		return decision{action: actNotStarted}
	case !hold:
		return decision{action: actAddFinalizer}
	case aborted(obj):
		return decision{action: actRollback, why: stopAborted}
	}
	return decision{action: actRollout}
}

// settled reports whether obj's status is about its current spec and says its rollout ended:
// there is nothing to do until the spec changes.
func settled(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Status.ObservedGeneration == obj.Generation && ended(obj)
}

// ended reports whether obj's status, of any generation, says its rollout ended. A rollout
// stopped on someone else's change to the template (phase Failed, reason TemplateChanged) has
// not: it still holds the workload, and goes on once the template has the rollout's images again,
// or rolls back when aborted.
func ended(obj *v1alpha1.InPlaceRollout) bool {
	return rollout.Phase(obj.Status.Phase).Terminal() && obj.Status.Reason != string(rollout.ReasonTemplateChanged)
}

// inFlight reports whether obj's status, of any generation, says its rollout has not ended.
func inFlight(obj *v1alpha1.InPlaceRollout) bool {
	return obj.Status.Phase != "" && !ended(obj)
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
