package customrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// TestEngineError: each error of a step is the run's condition, in the controller's words, or
// an error returned for the work queue to retry.
func TestEngineError(t *testing.T) {
	apiDown := errors.New("connection refused")
	tests := []struct {
		name   string
		st     rollout.Status
		err    error
		reason string // "" for an error to retry
		msg    string
	}{
		{"bad input", rollout.Status{}, &rollout.InvalidError{Msg: "no images"}, ReasonRefused, "no images; nothing was changed"},
		{"refused", rollout.Status{}, &rollout.PermanentError{Err: errors.New("forbidden")}, ReasonAPIError, "forbidden"},
		{"blocked", rollout.Status{RolloutID: "r1", Reason: rollout.ReasonPodFailed}, &rollout.BlockedError{Msg: "bad state"}, "PodFailed", "bad state"},
		{"blocked without a reason", rollout.Status{RolloutID: "r1"}, &rollout.BlockedError{Msg: "bad state"}, "Blocked", "bad state"},
		{"superseded", rollout.Status{}, &rollout.SupersededError{RolloutID: "a", By: "b"}, "Superseded", "rollout a was superseded by rollout b"},
		{"retry", rollout.Status{}, apiDown, "", "CustomRun ns/pr-rollout: connection refused"},
		{"API down", rollout.Status{}, &rollout.APIUnavailableError{For: time.Minute, Err: apiDown}, "", "CustomRun ns/pr-rollout: API trouble"},
		{"interrupted", rollout.Status{}, fmt.Errorf("stopped: %w", context.Canceled), "", "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := started(referenced("web"), now.Add(-time.Minute))
			requeue, err := (&Reconciler{}).engineError(run, tt.st, tt.err)
			if requeue != 0 {
				t.Errorf("requeue %s, want 0", requeue)
			}
			if tt.reason == "" {
				if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, tt.err) {
					t.Errorf("error %v, want %q wrapping the engine's", err, tt.msg)
				}
				if c := condition(run); c.Status != corev1.ConditionUnknown {
					t.Errorf("condition %s %s, want the run left running", c.Status, c.Reason)
				}
				return
			}
			if c := condition(run); err != nil || c.Status != corev1.ConditionFalse || c.Reason != tt.reason || !strings.Contains(c.Message, tt.msg) {
				t.Errorf("condition %s %s %q (error %v), want False %s %q", c.Status, c.Reason, c.Message, err, tt.reason, tt.msg)
			}
		})
	}
}

// TestSettle: each status a step reaches is the run's condition and when to look again.
func TestSettle(t *testing.T) {
	spec := rollout.Spec{Target: rollout.Ref{Kind: rollout.StatefulSet, Namespace: "ns", Name: "web"}, Holder: "tekton:ns/pr-rollout"}
	tests := []struct {
		name    string
		st      rollout.Status
		status  corev1.ConditionStatus
		reason  string
		msg     string
		requeue time.Duration
	}{
		{"progressing", rollout.Status{Phase: rollout.PhaseProgressing, Batch: 1, Batches: 2, Total: 3}, corev1.ConditionUnknown, "Running", "Progressing: batch 1/2", time.Second},
		{"rolling back", rollout.Status{Phase: rollout.PhaseRollingBack, Total: 3}, corev1.ConditionUnknown, "Running", "RollingBack", time.Second},
		{"succeeded", rollout.Status{Phase: rollout.PhaseSucceeded, Updated: 3, Total: 3}, corev1.ConditionTrue, "Succeeded", "Succeeded: 3 of 3 pods updated", 0},
		{"rolled back", rollout.Status{Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonPodFailed, Total: 3}, corev1.ConditionFalse, "PodFailed", "RolledBack", 0},
		{"failed", rollout.Status{Phase: rollout.PhaseFailed, Total: 3}, corev1.ConditionFalse, ReasonRollbackIncomplete, "Failed", 0},
		{"template changed", rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, Total: 3}, corev1.ConditionFalse, "TemplateChanged",
			"StatefulSet ns/web stays held by tekton:ns/pr-rollout: roll it back with `inplace-rollout rollback`", 0},
		{"released", rollout.Status{Phase: rollout.PhaseReleased, Total: 3}, corev1.ConditionFalse, ReasonRollbackIncomplete, "Released", 0},
		{"holding", rollout.Status{Phase: rollout.PhaseHolding, Total: 3}, corev1.ConditionFalse, ReasonRollbackIncomplete, "Holding", 0},
		{"paused", rollout.Status{Phase: rollout.PhasePaused, Batch: 2, Total: 3}, corev1.ConditionUnknown, "Paused", "to go on, annotate the CustomRun " + AcceptAnnotation + "=2", pausedRequeue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := started(referenced("web"), now.Add(-time.Minute))
			requeue := (&Reconciler{}).settle(run, spec, tt.st, time.Second)
			c := condition(run)
			if c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.msg) || requeue != tt.requeue {
				t.Errorf("condition %s %s %q, requeue %s; want %s %s %q, %s", c.Status, c.Reason, c.Message, requeue, tt.status, tt.reason, tt.msg, tt.requeue)
			}
		})
	}
}
