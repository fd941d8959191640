package rollout

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestOutcomeOf: every phase with every error the engine returns. An error decides when there is
// one, whatever the phase; without one, the phase does. Each kind carries the facts drivers phrase.
func TestOutcomeOf(t *testing.T) {
	apiDown := errors.New("connection refused")
	forbidden := errors.New("forbidden")
	phases := []struct {
		phase Phase
		kind  OutcomeKind
	}{
		{"", Running},
		{PhaseProgressing, Running},
		{PhaseAnalyzing, Running},
		{PhaseRollingBack, Running},
		{PhaseHolding, Holding},
		{PhasePaused, Paused},
		{PhaseSucceeded, Succeeded},
		{PhaseRolledBack, RolledBack},
		{PhaseFailed, NeedsPerson},
		{PhaseReleased, NeedsPerson},
		{PhaseHalted, NeedsPerson},
	}
	errs := []struct {
		name string
		err  error
		// want is the outcome's kind and facts, Phase, Reason and Err aside; RollingBack is
		// also set for any phase RollingBack when rollingBackPhase.
		want             Outcome
		rollingBackPhase bool
	}{
		{"cancelled", fmt.Errorf("StatefulSet shop/web: stopped between two steps: %w", context.Canceled), Outcome{Kind: Interrupted}, false},
		{"bad input", &InvalidError{Msg: "no images"}, Outcome{Kind: BadInput, Problem: "no images"}, false},
		{"bad input with a fix", fmt.Errorf("starting: %w", &InvalidError{Msg: "2 pods are not Ready", Fix: FixAllowUnready}),
			Outcome{Kind: BadInput, Problem: "2 pods are not Ready", Fix: FixAllowUnready}, false},
		{"superseded", &SupersededError{RolloutID: "a", By: "b"}, Outcome{Kind: Superseded}, false},
		{"blocked", &BlockedError{Msg: "bad state"}, Outcome{Kind: Blocked}, false},
		{"refused", &PermanentError{Err: forbidden}, Outcome{Kind: Refused}, true},
		{"refused mid-rollout", &PermanentError{Err: forbidden, RolloutID: "r1", Updated: 2}, Outcome{Kind: Refused, RolloutID: "r1", Updated: 2}, true},
		{"refused while rolling back", &PermanentError{Err: forbidden, RollingBack: true}, Outcome{Kind: Refused, RollingBack: true}, true},
		{"API down", &APIUnavailableError{For: 2 * time.Minute, Err: apiDown}, Outcome{Kind: Unavailable, For: 2 * time.Minute, LastErr: apiDown}, false},
		{"API down while rolling back", &APIUnavailableError{For: time.Minute, RollingBack: true, Err: apiDown},
			Outcome{Kind: Unavailable, For: time.Minute, LastErr: apiDown, RollingBack: true}, false},
		{"untyped", apiDown, Outcome{Kind: Retry}, false},
		{"deadline", context.DeadlineExceeded, Outcome{Kind: Retry}, false},
	}
	for _, p := range phases {
		st := Status{Phase: p.phase, Reason: ReasonPodFailed, RolloutID: "r0", Updated: 5}
		t.Run(string(p.phase)+"/no error", func(t *testing.T) {
			want := Outcome{Kind: p.kind, Phase: p.phase, Reason: ReasonPodFailed, RollingBack: p.phase == PhaseRollingBack}
			if got := OutcomeOf(st, nil); got != want {
				t.Errorf("OutcomeOf = %+v, want %+v", got, want)
			}
		})
		for _, e := range errs {
			t.Run(string(p.phase)+"/"+e.name, func(t *testing.T) {
				want := e.want
				want.Phase, want.Reason, want.Err = p.phase, ReasonPodFailed, e.err
				if e.rollingBackPhase && p.phase == PhaseRollingBack {
					want.RollingBack = true
				}
				if got := OutcomeOf(st, e.err); got != want {
					t.Errorf("OutcomeOf = %+v, want %+v", got, want)
				}
			})
		}
	}
}

// TestOutcomeTransient: only trouble that may pass is transient: the error Drive retries, and no
// other.
func TestOutcomeTransient(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, true},
		{&InvalidError{Msg: "x"}, false},
		{&SupersededError{}, false},
		{&BlockedError{Msg: "x"}, false},
		{&PermanentError{Err: errors.New("x")}, false},
		{&APIUnavailableError{Err: errors.New("x")}, true},
		{errors.New("x"), true},
	}
	for _, tt := range tests {
		if o := OutcomeOf(Status{Phase: PhaseProgressing}, tt.err); o.Transient() != tt.want {
			t.Errorf("%T %v: %v, Transient() = %t, want %t", tt.err, tt.err, o.Kind, o.Transient(), tt.want)
		}
	}
}

func TestOutcomeKindString(t *testing.T) {
	for k := Running; k <= Interrupted; k++ {
		if s := k.String(); s == "" || s[0] == 'O' {
			t.Errorf("kind %d has no name: %q", int(k), s)
		}
	}
	if s := OutcomeKind(99).String(); s != "OutcomeKind(99)" {
		t.Errorf("String() = %q", s)
	}
}
