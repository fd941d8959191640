package traffic

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// TestVerdict: how each outcome of a driver answers VerifyWeight, for each op: "" is Verified,
// anything else the RpcError Argo shows on the Rollout.
func TestVerdict(t *testing.T) {
	hold, full, abort := op{kind: opHold, weight: 20}, op{kind: opFull}, op{kind: opAbort}
	tests := []struct {
		name    string
		op      op
		nothing bool
		st      rollout.Status
		err     error
		want    string // "" for Verified
	}{
		{name: "held", op: hold, st: rollout.Status{Phase: rollout.PhaseHolding}},
		{name: "holding is not full promotion", op: full, st: rollout.Status{Phase: rollout.PhaseHolding, Message: "held"},
			want: "Rollout shop/web: full promotion of StatefulSet shop/web stopped at Holding (): held"},
		{name: "succeeded", op: full, st: rollout.Status{Phase: rollout.PhaseSucceeded}},
		{name: "succeeded past the weight", op: hold, st: rollout.Status{Phase: rollout.PhaseSucceeded}},
		{name: "paused", op: hold, st: rollout.Status{Phase: rollout.PhasePaused, Message: "inconclusive"},
			want: "Rollout shop/web: weight 20% of StatefulSet shop/web: inconclusive; to accept the batch, promote the Rollout past this step"},
		{name: "rolled back", op: hold, st: rollout.Status{Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonPodFailed, Message: "crash"},
			want: "Rollout shop/web: weight 20% of StatefulSet shop/web failed and was rolled back (PodFailed): crash; abort the Rollout"},
		{name: "needs a person", op: hold, st: rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, Message: "changed"},
			want: "Rollout shop/web: weight 20% of StatefulSet shop/web stopped at Failed (TemplateChanged): changed"},
		{name: "abort rolled back", op: abort, st: rollout.Status{Phase: rollout.PhaseRolledBack}},
		{name: "abort with nothing to do", op: abort, nothing: true},
		{name: "abort cut short", op: abort, st: rollout.Status{Phase: rollout.PhaseFailed, Message: "revert failed"},
			want: "Rollout shop/web: rolling back StatefulSet shop/web did not finish (Failed): revert failed; a person must look at its pods"},
		{name: "bad input", op: hold, err: &rollout.InvalidError{Msg: "no images"}, want: "Rollout shop/web: weight 20% of StatefulSet shop/web: no images"},
		{name: "blocked", op: full, err: &rollout.BlockedError{Msg: "bad state"}, want: "Rollout shop/web: full promotion of StatefulSet shop/web: bad state"},
		{name: "API down", op: abort, err: &rollout.APIUnavailableError{For: time.Minute, Err: errors.New("refused")}, want: "Rollout shop/web: abort of StatefulSet shop/web: API trouble"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := verdict("shop/web", "StatefulSet shop/web", tt.op, tt.nothing, tt.st, rollout.OutcomeOf(tt.st, tt.err))
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) {
				t.Errorf("verdict %q, want %q", got, tt.want)
			}
		})
	}
}
