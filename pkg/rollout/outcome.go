package rollout

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// OutcomeKind says, as a code, what a call to the engine came to. Each driver says it in its
// own words (an exit code, an Argo step phase, a CustomRun condition) with a switch on it, so
// that no driver tells the engine's error types apart itself.
type OutcomeKind int

// Outcome kinds: first those of a status (no error), then those of an error.
const (
	// Running: the rollout, or its rollback, goes on; the status is not settled.
	Running OutcomeKind = iota
	// Holding: the rollout holds at its hold point (PhaseHolding).
	Holding
	// Paused: an inconclusive analysis paused the rollout; a person accepts the batch or rolls
	// back (PhasePaused).
	Paused
	// Succeeded: every pod runs the new images and the workload is handed back.
	Succeeded
	// RolledBack: every pod the rollout touched is back on its previous images.
	RolledBack
	// NeedsPerson: the rollout ended where only a person can go on: its rollback failed, someone
	// else changed the template (PhaseFailed, reason TemplateChanged), or it was released part way
	// (PhaseReleased). Nothing retries it.
	NeedsPerson
	// Blocked: a step stopped on something on the cluster only a person can fix (a pod's state
	// annotation edited into something unreadable). It wrote nothing, and the same call goes on
	// once that is fixed.
	Blocked
	// BadInput: the rollout cannot run as asked, and nothing was written. Fix names a choice the
	// caller has besides fixing the input.
	BadInput
	// Refused: the API server refused a request, and no retry changes that. RollingBack,
	// RolloutID and Updated say what is left.
	Refused
	// Superseded: another rollout of the same holder replaced the caller's and carries its pods
	// on.
	Superseded
	// Unavailable: the API server kept failing for longer than the error budget (For). Nothing was
	// decided; the same call goes on from where the rollout is.
	Unavailable
	// Retry: trouble worth a retry, which may pass by itself.
	Retry
	// Interrupted: the caller's context was cancelled between two steps; the rollout is left as it
	// is, and the same call goes on.
	Interrupted
)

var outcomeKinds = [...]string{"Running", "Holding", "Paused", "Succeeded", "RolledBack", "NeedsPerson", "Blocked", "BadInput", "Refused",
	"Superseded", "Unavailable", "Retry", "Interrupted"}

func (k OutcomeKind) String() string {
	if k < 0 || int(k) >= len(outcomeKinds) {
		return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
	}
	return outcomeKinds[k]
}

// Outcome is what a call to the engine (a step, or a Drive) came to, as a small typed value: the
// kind, and the facts a driver needs to phrase it.
type Outcome struct {
	Kind OutcomeKind
	// Phase and Reason are the status's.
	Phase  Phase
	Reason Reason
	// Err is the error as the engine returned it; nil when the call came to a status. A driver
	// that shows the error shows it whole.
	Err error
	// Fix and Problem, for BadInput: the choice the engine names by code (empty for none), and
	// what is wrong in the engine's words without that choice; Err says both, the choice in words
	// that name no driver.
	Fix     Fix
	Problem string
	// RollingBack says a rollback was under way: left part way (Refused, Unavailable), or going
	// on (Running).
	RollingBack bool
	// RolloutID and Updated, for Refused: the rollout left in flight, the workload still held and
	// Updated pods on the new images. Empty, the step changed nothing.
	RolloutID string
	Updated   int
	// For and LastErr, for Unavailable: the error budget the API server's errors outlasted, and
	// the last of them.
	For     time.Duration
	LastErr error
}

// OutcomeOf says what a call that returned st and err came to. An error decides when there is
// one: a cancelled context first, then the engine's typed errors; any other error is worth a
// retry. Without one, the phase decides.
func OutcomeOf(st Status, err error) Outcome {
	o := Outcome{Phase: st.Phase, Reason: st.Reason, Err: err}
	var (
		invalid     *InvalidError
		superseded  *SupersededError
		blocked     *BlockedError
		permanent   *PermanentError
		unavailable *APIUnavailableError
	)
	switch {
	case err == nil:
		o.Kind = phaseKind(st.Phase)
		o.RollingBack = st.Phase == PhaseRollingBack
	case errors.Is(err, context.Canceled):
		o.Kind = Interrupted
	case errors.As(err, &invalid):
		o.Kind, o.Fix, o.Problem = BadInput, invalid.Fix, invalid.Msg
	case errors.As(err, &superseded):
		o.Kind = Superseded
	case errors.As(err, &blocked):
		o.Kind = Blocked
	case errors.As(err, &permanent):
		o.Kind, o.RolloutID, o.Updated = Refused, permanent.RolloutID, permanent.Updated
		o.RollingBack = permanent.RollingBack || st.Phase == PhaseRollingBack
	case errors.As(err, &unavailable):
		o.Kind, o.For, o.LastErr, o.RollingBack = Unavailable, unavailable.For, unavailable.Err, unavailable.RollingBack
	default:
		o.Kind = Retry
	}
	return o
}

// phaseKind is the kind of a call that came to a status in phase p.
func phaseKind(p Phase) OutcomeKind {
	switch p {
	case PhaseSucceeded:
		return Succeeded
	case PhaseHolding:
		return Holding
	case PhasePaused:
		return Paused
	case PhaseRolledBack:
		return RolledBack
	case PhaseFailed, PhaseReleased, PhaseHalted:
		return NeedsPerson
	}
	return Running
}

// Transient reports trouble that may pass by itself: the API server failing (Retry,
// Unavailable) or the call interrupted. Calling again goes on from where the rollout is; every
// other outcome stands until something changes on the cluster.
func (o Outcome) Transient() bool {
	return o.Kind == Retry || o.Kind == Unavailable || o.Kind == Interrupted
}
