package step

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// TestStepVerdict: each outcome of a driver is the step phase Argo gets, in the plugin's words:
// trouble that may pass an RpcError (the driver forgotten, so that the next Run starts afresh),
// a verdict Successful or Failed, a pause Running; never Phase Error.
func TestStepVerdict(t *testing.T) {
	apiDown := errors.New("connection refused")
	tests := []struct {
		name   string
		st     rollout.Status
		err    error
		phase  types.StepPhase
		rpcErr string
		msg    string
		forget bool
	}{
		{name: "succeeded", st: rollout.Status{Phase: rollout.PhaseSucceeded, Updated: 3, Total: 3, Message: "done"},
			phase: types.PhaseSuccessful, msg: "Succeeded: 3 of 3 pods updated: done"},
		{name: "holding", st: rollout.Status{Phase: rollout.PhaseHolding, Updated: 1, Total: 3},
			phase: types.PhaseSuccessful, msg: "Holding: 1 of 3 pods updated"},
		{name: "paused", st: rollout.Status{Phase: rollout.PhasePaused, Updated: 1, Total: 3, Reason: rollout.ReasonAnalysisInconclusive},
			phase: types.PhaseRunning, msg: "Paused: 1 of 3 pods updated (AnalysisInconclusive)", forget: true},
		{name: "rolled back", st: rollout.Status{Phase: rollout.PhaseRolledBack, Total: 3, Reason: rollout.ReasonPodFailed, Message: "rolled back"},
			phase: types.PhaseFailed, msg: "RolledBack: 0 of 3 pods updated (PodFailed): rolled back"},
		{name: "needs a person", st: rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, Total: 3},
			phase: types.PhaseFailed, msg: "Failed: 0 of 3 pods updated (TemplateChanged)"},
		{name: "bad input", err: &rollout.InvalidError{Msg: "no images"}, phase: types.PhaseFailed, msg: "Rollout shop/shop-web: no images"},
		{name: "refused", err: &rollout.PermanentError{Err: errors.New("forbidden")}, phase: types.PhaseFailed, msg: "Rollout shop/shop-web: forbidden"},
		{name: "blocked", err: &rollout.BlockedError{Msg: "bad state"}, phase: types.PhaseFailed, msg: "Rollout shop/shop-web: bad state"},
		{name: "superseded", err: &rollout.SupersededError{RolloutID: "a", By: "b"}, phase: types.PhaseFailed,
			msg: "Rollout shop/shop-web: rollout a was superseded by rollout b; this command's pods are carried on by it"},
		{name: "API down", err: &rollout.APIUnavailableError{For: time.Minute, Err: apiDown}, rpcErr: "Rollout shop/shop-web: API trouble", forget: true},
		{name: "retry", err: apiDown, rpcErr: "Rollout shop/shop-web: connection refused", forget: true},
		{name: "interrupted", err: fmt.Errorf("stopped between two steps: %w", context.Canceled), rpcErr: "context canceled", forget: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, rpcErr, forget := stepVerdict("shop/shop-web", tt.st, rollout.OutcomeOf(tt.st, tt.err))
			if res.Phase != tt.phase || forget != tt.forget || res.Phase == types.PhaseError {
				t.Errorf("verdict %s, forget %t; want %s, forget %t", res.Phase, forget, tt.phase, tt.forget)
			}
			if tt.rpcErr != "" {
				if !strings.Contains(rpcErr.ErrorString, tt.rpcErr) {
					t.Errorf("RpcError %q, want %q", rpcErr.ErrorString, tt.rpcErr)
				}
				return
			}
			if rpcErr.HasError() || res.Message != tt.msg || len(res.Status) == 0 {
				t.Errorf("verdict %q (RpcError %q, status %s), want %q with a status", res.Message, rpcErr.ErrorString, res.Status, tt.msg)
			}
			if tt.phase == types.PhaseRunning && res.RequeueAfter != RequeueAfter {
				t.Errorf("RequeueAfter %s, want %s", res.RequeueAfter, RequeueAfter)
			}
		})
	}
}
