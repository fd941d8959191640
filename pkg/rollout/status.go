package rollout

import (
	"time"

	"github.com/inplace-rollout/inplace-rollout/analysis"
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
	// PhaseFailed means the rollback itself failed: a person must look.
	PhaseFailed Phase = "Failed"
)

// Terminal reports whether the rollout needs no more reconciling.
func (p Phase) Terminal() bool {
	return p == PhaseSucceeded || p == PhaseRolledBack || p == PhaseFailed
}

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
	Updated    int    `json:"updated"`
	Updating   int    `json:"updating"`
	RolledBack int    `json:"rolledBack"`
	Message    string `json:"message,omitempty"`
	// Analysis is the current or last batch analysis, with its last few measurements.
	Analysis *analysis.Run `json:"analysis,omitempty"`
}

// Result tells the caller what to do next.
type Result struct {
	Phase Phase
	// RequeueAfter is when to call Reconcile again, while the phase is not terminal.
	RequeueAfter time.Duration
	Message      string
}
