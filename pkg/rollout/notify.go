package rollout

import (
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// NotificationKind is an outcome of a rollout that people hear of outside the cluster.
type NotificationKind string

// The notifications: a rollout succeeded, paused on an inconclusive analysis, rolled back, or
// stopped for a person to decide (someone else changed the template).
const (
	NotifySucceeded   NotificationKind = "succeeded"
	NotifyPaused      NotificationKind = "paused"
	NotifyRolledBack  NotificationKind = "rolledBack"
	NotifyNeedsPerson NotificationKind = "needsPerson"
)

// Notification is one outcome of one rollout. The engine hands each to its Notifier once: from
// the step whose write reached the outcome, as it records the workload's Event, so a driver
// started again does not send it again.
type Notification struct {
	Kind      NotificationKind
	Target    workload.Ref
	RolloutID string
	Phase     Phase
	Reason    Reason
	Message   string
	At        time.Time
}

// Notifier sends notifications out of the cluster. Notify returns at once: sending, and
// retrying, is the Notifier's, and never holds a step.
type Notifier interface {
	Notify(Notification)
}

// notify hands the outcome kind of the rollout id on w, as st reports it, to the engine's
// Notifier, if any.
func (e *Engine) notify(ref workload.Ref, id string, kind NotificationKind, st Status) {
	if e.Notifier == nil {
		return
	}
	e.Notifier.Notify(Notification{Kind: kind, Target: ref, RolloutID: id, Phase: st.Phase, Reason: st.Reason, Message: st.Message, At: e.now().UTC()})
}
