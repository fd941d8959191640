package rollout

import (
	"testing"

	"github.com/inplace-rollout/inplace-rollout/analysis"
)

// TestSummary: a status in the one line the drivers show.
func TestSummary(t *testing.T) {
	tests := []struct {
		name string
		st   Status
		want string
	}{
		{"not started", Status{}, "starting"},
		{"no batch yet", Status{Phase: PhaseProgressing, Total: 3, Message: "started"}, "Progressing: 0/3 pods updated; started"},
		{"a batch, no analysis", Status{Phase: PhaseProgressing, Batch: 2, Batches: 4, Updated: 30, Total: 100, Message: "batch 2/4: 30/100 pods updated, 5 updating"},
			"Progressing: batch 2/4, 30/100 pods updated; batch 2/4: 30/100 pods updated, 5 updating"},
		{"the last batch passed", Status{Phase: PhaseProgressing, Batch: 2, Batches: 4, Updated: 30, Total: 100, Analysis: &analysis.Run{Batch: 1, Verdict: analysis.Pass}},
			"Progressing: batch 2/4, 30/100 pods updated, analysis of batch 1: Pass"},
		{"analysing", Status{Phase: PhaseAnalyzing, Batch: 2, Batches: 4, Updated: 50, Total: 100, Analysis: &analysis.Run{Batch: 2}},
			"Analyzing: batch 2/4, 50/100 pods updated, analysing batch 2"},
		{"rolling back", Status{Phase: PhaseRollingBack, RolledBack: 4, Total: 10, Message: "rolling back: pod web-9 failed"},
			"RollingBack: 4 pods back on their previous images; rolling back: pod web-9 failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summary(tt.st); got != tt.want {
				t.Errorf("Summary = %q, want %q", got, tt.want)
			}
		})
	}
}
