package rollout

import (
	"fmt"
	"strings"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Phase is where a rollout is.
type Phase string

// Rollout phases.
const (
	PhaseProgressing Phase = "Progressing"
	// PhaseAnalyzing: a complete batch is being measured against Prometheus.
	PhaseAnalyzing Phase = "Analyzing"
	// PhasePaused: an analysis was inconclusive; resume or roll back.
	PhasePaused      Phase = "Paused"
	PhaseSucceeded   Phase = "Succeeded"
	PhaseRollingBack Phase = "RollingBack"
	PhaseRolledBack  Phase = "RolledBack"
	// PhaseFailed means a person must look: the rollback itself failed, or (reason
	// TemplateChanged) the rollout stopped on someone else's change to the template and waits
	// for a decision, with nothing rolled back.
	PhaseFailed Phase = "Failed"
	// PhaseHolding: the rollout reached its hold point (Spec.UpTo): that many pods run the new
	// images and their batch passed analysis. The workload stays held; a call with a higher
	// UpTo and the same images goes on, a rollback undoes.
	PhaseHolding Phase = "Holding"
	// PhaseReleased: the last rollout was let go of part way (PhaseReleased, which
	// versions before full promotion went in place wrote): the workload has its update strategy
	// back.
	PhaseReleased Phase = "Released"
	// PhaseHalted is a phase of a Record only: someone else changed the workload's template while
	// the rollout held it, and the rollout stopped there, the workload still held, nothing rolled
	// back. A Status reports it as PhaseFailed with reason TemplateChanged.
	PhaseHalted Phase = "Halted"
)

// Terminal reports whether the rollout needs no more reconciling.
func (p Phase) Terminal() bool {
	return p == PhaseSucceeded || p == PhaseRolledBack || p == PhaseFailed || p == PhaseReleased
}

// Settled reports whether the rollout stays where it is until someone asks for more: it ended,
// it is paused on an inconclusive analysis, or it holds at its hold point. A driver's loop stops
// there.
func (p Phase) Settled() bool {
	return p.Terminal() || p == PhasePaused || p == PhaseHolding
}

// Reason says, as a code, why a rollout is where it is; Status.Message says it in words.
type Reason string

// Reasons. Each driver phrases its own remedy from them.
const (
	// ReasonPodFailed: a pod failed its update (a crash, a failed pull, a restart climb) or
	// cannot be updated in place.
	ReasonPodFailed Reason = "PodFailed"
	// ReasonAnalysisFailed: a batch failed its analysis, or the analysis could not measure.
	ReasonAnalysisFailed Reason = "AnalysisFailed"
	// ReasonAnalysisInconclusive: a batch's analysis was inconclusive (the rollout pauses, or
	// fails when so configured). Paused, a person accepts the batch to go on, or rolls back.
	ReasonAnalysisInconclusive Reason = "AnalysisInconclusive"
	// ReasonDeadlineExceeded: a pod or a batch made no progress within the progress deadline.
	ReasonDeadlineExceeded Reason = "DeadlineExceeded"
	// ReasonTemplateChanged: someone else changed the workload's template while the rollout
	// held it; the rollout stopped, nothing rolled back, and a person decides: roll back to
	// Status.PreviousImages (keeping that template, or restoring it too), or put the rollout's
	// images back in the template, after which the rollout goes on.
	ReasonTemplateChanged Reason = "TemplateChanged"
	// ReasonSuperseded: the rollout replaced another one in flight.
	ReasonSuperseded Reason = "Superseded"
	// ReasonRollbackRequested: a person (or a driver) asked for the rollback.
	ReasonRollbackRequested Reason = "RollbackRequested"
)

// Status is a small summary of a rollout, the same size whatever the number of pods. It is a
// cache: Reconcile recomputes it from the cluster.
type Status struct {
	RolloutID string `json:"rolloutID,omitempty"`
	Phase     Phase  `json:"phase,omitempty"`
	// Batch is the 1-based batch in progress; Batches how many there are.
	Batch   int `json:"batch"`
	Batches int `json:"batches"`
	// Total is the workload's desired pod count.
	Total int `json:"total"`
	// Updated pods run the new images; Updating are changing now; RolledBack are back on
	// their previous images.
	Updated    int `json:"updated"`
	Updating   int `json:"updating"`
	RolledBack int `json:"rolledBack"`
	// Unhealthy pods are among the Updated: a container of theirs was already failing before
	// the update (say CrashLoopBackOff) and still is. They are reported, not blamed: the
	// rollout goes on without waiting for them.
	Unhealthy int `json:"unhealthy,omitempty"`
	// Reason is why the rollout is rolling back, rolled back, paused or stopped; empty while
	// it progresses normally or after it succeeded.
	Reason Reason `json:"reason,omitempty"`
	// Message says where the rollout is in terms of the cluster, naming no driver's commands:
	// a driver adds its own remedy from Phase and Reason (and PreviousImages).
	Message string `json:"message,omitempty"`
	// PreviousImages are the images, by container, a rollback puts back; set when the outcome
	// leaves that choice to a person (reason TemplateChanged), so a driver can name them.
	PreviousImages map[string]string `json:"previousImages,omitempty"`
	// PreviousResources are, likewise, the resources a rollback puts back, of a rollout that
	// changes resources.
	PreviousResources map[string]inplace.Resources `json:"previousResources,omitempty"`
	// Analysis is the current or last batch analysis, with its last few measurements.
	Analysis *analysis.Run `json:"analysis,omitempty"`
}

// Summary is st in one line, as the drivers show a rollout where people look (an Argo step's
// message, a CustomRun's condition): the phase, the batch, the pods updated of the total, the
// last batch analysis' verdict, and the message. For example "Progressing: batch 2/4, 30/100
// pods updated, analysis of batch 1: Pass; 5 updating".
func Summary(st Status) string {
	if st.Phase == "" {
		return "starting"
	}
	var b strings.Builder
	b.WriteString(string(st.Phase) + ": ")
	switch {
	case st.Phase == PhaseRollingBack:
		fmt.Fprintf(&b, "%d pods back on their previous images", st.RolledBack)
	case st.Batches > 0:
		fmt.Fprintf(&b, "batch %d/%d, %d/%d pods updated", st.Batch, st.Batches, st.Updated, st.Total)
	default:
		fmt.Fprintf(&b, "%d/%d pods updated", st.Updated, st.Total)
	}
	switch a := st.Analysis; {
	case a == nil:
	case a.Verdict == "":
		fmt.Fprintf(&b, ", analysing batch %d", a.Batch)
	default:
		fmt.Fprintf(&b, ", analysis of batch %d: %s", a.Batch, a.Verdict)
	}
	if st.Message != "" {
		b.WriteString("; " + st.Message)
	}
	return b.String()
}

// OutcomeMessage says in one line how a rollout ended, as the drivers whose objects keep a
// rollout's end (a CustomRun's condition, an InPlaceRollout's status) show it: the phase, the
// pods updated of the total, those rolled back and those already failing before their update,
// the reason and the message. For example "RolledBack: 1 of 4 pods updated, 1 rolled back
// (PodFailed): ...".
func OutcomeMessage(st Status) string {
	msg := fmt.Sprintf("%s: %d of %d pods updated", st.Phase, st.Updated, st.Total)
	if st.RolledBack > 0 {
		msg += fmt.Sprintf(", %d rolled back", st.RolledBack)
	}
	if st.Unhealthy > 0 {
		msg += fmt.Sprintf(", %d already failing before their update", st.Unhealthy)
	}
	if st.Reason != "" {
		msg += " (" + string(st.Reason) + ")"
	}
	if st.Message != "" {
		msg += ": " + st.Message
	}
	return msg
}

// StepError is an error of a driver's step of the rollout of Target, for the log line to name
// the rollout (LogAttrs).
type StepError struct {
	Target workload.Ref
	// RolloutID is the rollout's, when the driver knows it.
	RolloutID string
	Err       error
}

func (e *StepError) Error() string { return e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// LogAttrs name the rollout in a log line: namespace, workload and, when known, rolloutID.
func (e *StepError) LogAttrs() []any {
	attrs := LogAttrs(e.Target)
	if e.RolloutID != "" {
		attrs = append(attrs, "rolloutID", e.RolloutID)
	}
	return attrs
}
