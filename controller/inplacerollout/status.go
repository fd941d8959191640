package inplacerollout

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Condition types. Progressing, Succeeded, RolledBack and Paused say where the rollout is;
// Reconciling, Stalled and Ready are the ones kstatus (Flux, kpt, cli-utils) reads.
const (
	CondProgressing = "Progressing"
	CondSucceeded   = "Succeeded"
	CondRolledBack  = "RolledBack"
	CondPaused      = "Paused"
	CondReady       = "Ready"
	CondReconciling = "Reconciling"
	CondStalled     = "Stalled"
)

// Reasons of the controller's own, beside the engine's (PodFailed, AnalysisFailed, ...).
const (
	// ReasonInvalidSpec: the spec is wrong; nothing was changed.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonRefused: the rollout could not start (no such workload, another holder's rollout
	// in flight, unreadable pod states); nothing was changed.
	ReasonRefused = "Refused"
	// ReasonAPIError: an API error no retry fixes.
	ReasonAPIError = "APIError"
	// ReasonRollbackIncomplete: a rollback could not finish; a person must look.
	ReasonRollbackIncomplete = "RollbackIncomplete"
	// ReasonDeleted: the object was deleted in flight and its rollout rolled back.
	ReasonDeleted = "Deleted"
)

// HolderPrefix begins the lock holder of every InPlaceRollout object's rollout.
const HolderPrefix = "inplacerollout:"

// Holder is the lock holder of obj's rollout.
func Holder(obj *v1alpha1.InPlaceRollout) string {
	return HolderPrefix + obj.Namespace + "/" + obj.Name
}

// prevStatus is obj's status as the engine's, for its next step: empty when the status is about
// an earlier spec, so that the engine starts (or supersedes with) the current one rather than
// report the end of the last.
func prevStatus(obj *v1alpha1.InPlaceRollout) rollout.Status {
	s := obj.Status
	if s.ObservedGeneration != obj.Generation {
		return rollout.Status{}
	}
	return rollout.Status{RolloutID: s.RolloutID, Phase: rollout.Phase(s.Phase), Batch: int(s.Batch), Batches: int(s.Batches),
		Total: int(s.Total), Updated: int(s.Updated), RolledBack: int(s.RolledBack), Reason: rollout.Reason(s.Reason)}
}

// pauseOf is the batch obj's status says is paused on an inconclusive analysis, if any.
func pauseOf(obj *v1alpha1.InPlaceRollout) (rollout.Pause, bool) {
	s := obj.Status
	if s.ObservedGeneration != obj.Generation || rollout.Phase(s.Phase) != rollout.PhasePaused || s.Analysis == nil {
		return rollout.Pause{}, false
	}
	return rollout.Pause{RolloutID: s.RolloutID, Batch: int(s.Analysis.Batch), Pods: int(s.Analysis.Pods)}, true
}

// setStatus sets obj's status from the engine's st, with message as the status's message (the
// engine's, with the driver's remedy): counts, the last verdict (kept from the same rollout's
// earlier status when st carries none, as an ended rollout's status read from its lock does), the
// generation it is about, and the conditions.
func setStatus(obj *v1alpha1.InPlaceRollout, st rollout.Status, reason, message string, now metav1.Time) {
	s := &obj.Status
	verdict := v1alpha1.LastVerdict(st.Analysis, st.RolloutID, s.Analysis, s.RolloutID)
	s.ObservedGeneration = obj.Generation
	s.Phase, s.Reason, s.Message = string(st.Phase), reason, message
	s.RolloutID = st.RolloutID
	s.Batch, s.Batches = int32(st.Batch), int32(st.Batches)
	s.Updated, s.Total, s.RolledBack = int32(st.Updated), int32(st.Total), int32(st.RolledBack)
	s.Analysis = verdict
	setConditions(s, obj.Generation, now)
}

// setFailed sets obj's status to phase Failed with reason and message: a spec that is wrong, a
// rollout refused, a rollback that cannot finish. The counts stay as the last status had them.
func setFailed(obj *v1alpha1.InPlaceRollout, reason, message string, now metav1.Time) {
	s := &obj.Status
	if s.ObservedGeneration != obj.Generation {
		*s = v1alpha1.InPlaceRolloutStatus{Conditions: s.Conditions}
	}
	s.ObservedGeneration = obj.Generation
	s.Phase, s.Reason, s.Message = string(rollout.PhaseFailed), reason, message
	setConditions(s, obj.Generation, now)
}

// setConditions sets every condition from the status's phase. Succeeded follows Tekton's and
// Knative's habit: Unknown while the rollout has not ended, True when it succeeded, False when it
// rolled back or stopped, so that `kubectl wait --for=condition=Succeeded` waits for success and
// `--for=condition=Succeeded=False` for failure.
func setConditions(s *v1alpha1.InPlaceRolloutStatus, gen int64, now metav1.Time) {
	phase := rollout.Phase(s.Phase)
	reason := s.Reason
	if reason == "" {
		reason = s.Phase
	}
	moving := phase == rollout.PhaseProgressing || phase == rollout.PhaseAnalyzing || phase == rollout.PhaseRollingBack
	stalled := phase == rollout.PhaseRolledBack || phase == rollout.PhaseFailed
	succeeded := metav1.ConditionUnknown
	switch {
	case phase == rollout.PhaseSucceeded:
		succeeded = metav1.ConditionTrue
	case stalled:
		succeeded = metav1.ConditionFalse
	}
	for _, c := range []struct {
		typ    string
		status metav1.ConditionStatus
	}{
		{CondProgressing, condition(moving)},
		{CondSucceeded, succeeded},
		{CondRolledBack, condition(phase == rollout.PhaseRolledBack)},
		{CondPaused, condition(phase == rollout.PhasePaused)},
		{CondReady, condition(phase == rollout.PhaseSucceeded || phase == rollout.PhaseHolding)},
		{CondReconciling, condition(moving || phase == rollout.PhasePaused)},
		{CondStalled, condition(stalled)},
	} {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: c.typ, Status: c.status, ObservedGeneration: gen,
			LastTransitionTime: now, Reason: reason, Message: s.Message})
	}
}

func condition(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}
