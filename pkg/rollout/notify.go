package rollout

import (
	"context"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
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

// outcome reports that rollout id on w reached the outcome kind, as st says: ev, its Event, on
// the workload, and the notification to the engine's Notifier, if any. Both go out from the one
// step whose write reached the outcome.
func (e *Engine) outcome(ctx context.Context, w workload.Observed, id string, ev inplace.Event, kind NotificationKind, st Status) {
	e.recordOn(ctx, w, id, ev)
	if e.Notifier != nil {
		e.Notifier.Notify(Notification{Kind: kind, Target: w.Ref(), RolloutID: id, Phase: st.Phase, Reason: st.Reason, Message: st.Message, At: e.now().UTC()})
	}
}
