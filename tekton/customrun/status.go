package customrun

import (
	"strconv"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Result names of a run, the same as the catalog Task's (the CLI's --results-dir files).
const (
	ResultPhase       = "phase"
	ResultUpdatedPods = "updated-pods"
	ResultRolledBack  = "rolled-back"
	ResultMessage     = "message"
)

// Condition reasons of our own, beside Tekton's (Started, Running, Succeeded, Failed,
// CustomRunCancelled, CustomRunTimedOut, CustomRunWorkspaceNotSupported). A failed rollout's
// reason is the engine's (PodFailed, AnalysisFailed, DeadlineExceeded, TemplateChanged, ...).
const (
	// ReasonInvalidSpec: the spec, the referenced InPlaceRollout or a param is wrong; nothing
	// was changed.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonRefused: the engine refused to start (no such workload, another holder's rollout in
	// flight, unreadable pod states); nothing was changed.
	ReasonRefused = "Refused"
	// ReasonAPIError: an API error no retry fixes.
	ReasonAPIError = "APIError"
	// ReasonRollbackIncomplete: a rollback could not finish; a person must look.
	ReasonRollbackIncomplete = "RollbackIncomplete"
	// ReasonRetrying: an attempt rolled back and the next one starts.
	ReasonRetrying = "Retrying"
)

// Progress is what a run keeps in status.extraFields: where its rollout is, in counts, the same
// size whatever the number of pods.
type Progress struct {
	RolloutID  string         `json:"rolloutID,omitempty"`
	Target     string         `json:"target,omitempty"`
	Phase      rollout.Phase  `json:"phase,omitempty"`
	Batch      int            `json:"batch"`
	Batches    int            `json:"batches"`
	Updated    int            `json:"updated"`
	Total      int            `json:"total"`
	RolledBack int            `json:"rolledBack"`
	Unhealthy  int            `json:"unhealthy,omitempty"`
	Reason     rollout.Reason `json:"reason,omitempty"`
	// Verdict is the last batch analysis: Pass, Fail, Inconclusive, or Running while it measures.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// Verdict is a batch analysis' outcome: the 1-based batch, the updated pod count it ends at,
// and the verdict.
type Verdict struct {
	Batch   int    `json:"batch"`
	Pods    int    `json:"pods"`
	Verdict string `json:"verdict"`
}

// progressOf is st in a run's words.
func progressOf(st rollout.Status, target string) Progress {
	p := Progress{RolloutID: st.RolloutID, Target: target, Phase: st.Phase, Batch: st.Batch, Batches: st.Batches,
		Updated: st.Updated, Total: st.Total, RolledBack: st.RolledBack, Unhealthy: st.Unhealthy, Reason: st.Reason,
		Verdict: verdictOf(st.Analysis)}
	return p
}

// next is the progress after p when the rollout's status is st: a status that carries no
// analysis (an ended rollout's, read from its lock) keeps the last verdict of the same rollout.
func (p Progress) next(st rollout.Status, target string) Progress {
	n := progressOf(st, target)
	if n.Verdict == nil && n.RolloutID == p.RolloutID {
		n.Verdict = p.Verdict
	}
	if n.Target == "" {
		n.Target = p.Target
	}
	return n
}

func verdictOf(run *analysis.Run) *Verdict {
	if run == nil {
		return nil
	}
	return &Verdict{Batch: run.Batch, Pods: run.Pods, Verdict: run.Shown()}
}

// status is p as the engine's Status, for the next step.
func (p Progress) status() rollout.Status {
	return rollout.Status{RolloutID: p.RolloutID, Phase: p.Phase, Batch: p.Batch, Batches: p.Batches, Total: p.Total,
		Updated: p.Updated, RolledBack: p.RolledBack, Unhealthy: p.Unhealthy, Reason: p.Reason}
}

// pause is the batch p says is paused on an inconclusive analysis, if any.
func (p Progress) pause() (rollout.Pause, bool) {
	if p.Phase != rollout.PhasePaused || p.Verdict == nil {
		return rollout.Pause{}, false
	}
	return rollout.Pause{RolloutID: p.RolloutID, Batch: p.Verdict.Batch, Pods: p.Verdict.Pods}, true
}

// progressFrom reads a run's extraFields; what does not decode is no progress, which the
// engine then observes afresh from the cluster.
func progressFrom(s *v1beta1.CustomRunStatus) Progress {
	var p Progress
	if err := s.DecodeExtraFields(&p); err != nil {
		return Progress{}
	}
	return p
}

func setProgress(s *v1beta1.CustomRunStatus, p Progress) {
	if err := s.EncodeExtraFields(p); err != nil {
		// A struct of strings and ints always marshals.
		panic(err)
	}
}

// setResults writes the run's results from its last status.
func setResults(s *v1beta1.CustomRunStatus, st rollout.Status, message string) {
	s.Results = []v1beta1.CustomRunResult{
		{Name: ResultPhase, Value: string(st.Phase)},
		{Name: ResultUpdatedPods, Value: strconv.Itoa(st.Updated)},
		{Name: ResultRolledBack, Value: strconv.Itoa(st.RolledBack)},
		{Name: ResultMessage, Value: message},
	}
}
