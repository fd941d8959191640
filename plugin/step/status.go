package step

import (
	"encoding/json"
	"fmt"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// StepStatus is what Run keeps in the step's status on the Rollout: a few counts and the last
// verdict, the same size whatever the number of pods.
type StepStatus struct {
	RolloutID string         `json:"rolloutID,omitempty"`
	Phase     rollout.Phase  `json:"phase,omitempty"`
	Batch     int            `json:"batch"`
	Batches   int            `json:"batches"`
	Updated   int            `json:"updated"`
	Total     int            `json:"total"`
	Reason    rollout.Reason `json:"reason,omitempty"`
	Verdict   *Verdict       `json:"verdict,omitempty"`
}

// Verdict is the last batch analysis, in Argo's words: Successful, Failed, Inconclusive, Error,
// or Running while it measures.
type Verdict struct {
	Batch int    `json:"batch"`
	Phase string `json:"phase"`
}

// verdictOf is the verdict of run, or nil.
func verdictOf(run *analysis.Run) *Verdict {
	if run == nil {
		return nil
	}
	v := &Verdict{Batch: run.Batch, Phase: string(run.Verdict)}
	switch run.Verdict {
	case "":
		v.Phase = "Running"
	case analysis.Pass:
		v.Phase = "Successful"
	case analysis.Fail:
		v.Phase = "Failed"
	}
	return v
}

func stepStatus(st rollout.Status) json.RawMessage {
	b, err := json.Marshal(StepStatus{RolloutID: st.RolloutID, Phase: st.Phase, Batch: st.Batch, Batches: st.Batches,
		Updated: st.Updated, Total: st.Total, Reason: st.Reason, Verdict: verdictOf(st.Analysis)})
	if err != nil {
		// A struct of strings and ints always marshals.
		panic(err)
	}
	return b
}

func outcomeMessage(st rollout.Status) string {
	msg := fmt.Sprintf("%s: %d of %d pods updated", st.Phase, st.Updated, st.Total)
	if st.Reason != "" {
		msg += " (" + string(st.Reason) + ")"
	}
	if st.Message != "" {
		msg += ": " + st.Message
	}
	return msg
}
