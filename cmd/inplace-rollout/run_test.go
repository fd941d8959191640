package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestBarLineFillsWithTheBatchInProgress(t *testing.T) {
	batches, err := rollout.ParseBatches("1,50%,100%")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		st          rollout.Status
		hashes      int
		pods, inAll string
	}{
		{"first batch not done", rollout.Status{Batch: 1, Batches: 3, Total: 6, Updated: 0}, 0, "0/1 pods", "(0/6 in all)"},
		{"second batch starts empty", rollout.Status{Batch: 2, Batches: 3, Total: 6, Updated: 1}, 0, "0/2 pods", "(1/6 in all)"},
		{"second batch half done", rollout.Status{Batch: 2, Batches: 3, Total: 6, Updated: 2}, 15, "1/2 pods", "(2/6 in all)"},
		{"last batch done", rollout.Status{Batch: 3, Batches: 3, Total: 6, Updated: 6}, 30, "3/3 pods", "(6/6 in all)"},
		{"no batch known yet", rollout.Status{Total: 6, Updated: 3}, 15, "3/6 pods", "(3/6 in all)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := barLine(tt.st, batches)
			if got := strings.Count(line, "#"); got != tt.hashes {
				t.Errorf("%q: %d of 30 filled, want %d", line, got, tt.hashes)
			}
			if !strings.Contains(line, tt.pods) || !strings.Contains(line, tt.inAll) {
				t.Errorf("%q, want %q and %q", line, tt.pods, tt.inAll)
			}
		})
	}
}

// TestFinishMapsWhatTheEngineReturns: each outcome of Drive ends the command with the exit code
// and message the CLI has always given it.
func TestFinishMapsWhatTheEngineReturns(t *testing.T) {
	target := workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	apiDown := errors.New("connection refused")
	tests := []struct {
		name        string
		st          rollout.Status
		err         error
		rollbackCmd bool
		code        int
		msg         string
	}{
		{"succeeded", rollout.Status{Phase: rollout.PhaseSucceeded}, nil, false, exitSucceeded, ""},
		{"holding", rollout.Status{Phase: rollout.PhaseHolding}, nil, false, exitSucceeded, ""},
		{"rolled back by run", rollout.Status{Phase: rollout.PhaseRolledBack, Message: "rolled back 1 pods"}, nil, false, exitFailedRolledBack, "rolled back 1 pods"},
		{"rolled back by rollback", rollout.Status{Phase: rollout.PhaseRolledBack}, nil, true, exitSucceeded, ""},
		{"paused", rollout.Status{Phase: rollout.PhasePaused, Message: "paused: x"}, nil, false, exitPaused, "paused: x"},
		{"failed", rollout.Status{Phase: rollout.PhaseFailed, Message: "rollback incomplete"}, nil, false, exitRollbackIncomplete, "rollback incomplete"},
		{"interrupted", rollout.Status{Phase: rollout.PhaseProgressing}, fmt.Errorf("%s: stopped: %w", target, context.Canceled), false, exitInterrupted,
			"stopped; StatefulSet shop/web is left as it is. Run the same command again to resume, or `inplace-rollout rollback` to undo"},
		{"bad input", rollout.Status{}, &rollout.InvalidError{Msg: "no images"}, false, exitBadInput, "no images"},
		{"superseded", rollout.Status{}, &rollout.SupersededError{RolloutID: "a", By: "b"}, false, exitSuperseded, "superseded by rollout b"},
		{"blocked", rollout.Status{}, &rollout.BlockedError{Msg: "bad state"}, false, exitRollbackIncomplete, target.String() + ": stopped, a person must look: bad state"},
		{"refused", rollout.Status{}, &rollout.PermanentError{Err: errors.New("forbidden")}, false, exitAPIRefused,
			"the API server refused a request, and retrying will not change that: forbidden"},
		{"refused: not found", rollout.Status{}, &rollout.PermanentError{Err: apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "web")}, false, exitBadInput,
			`statefulsets.apps "web" not found (nothing changed)`},
		{"refused mid-rollout", rollout.Status{}, &rollout.PermanentError{Err: errors.New("forbidden"), RolloutID: "r1", Updated: 2}, false, exitRollbackIncomplete,
			"forbidden; rollout r1 is left in flight (2 pods updated, StatefulSet shop/web still held): fix the cause, then run the same command again to resume, or `inplace-rollout rollback` to undo"},
		{"refused while rolling back", rollout.Status{}, &rollout.PermanentError{Err: errors.New("forbidden"), RollingBack: true}, false, exitRollbackIncomplete,
			"rollback incomplete: the API server refused a request"},
		{"API down", rollout.Status{}, &rollout.APIUnavailableError{For: 2 * time.Minute, Err: apiDown}, false, exitAPIUnavailable,
			"giving up after 2m of errors from the API server; StatefulSet shop/web is left as it is and the rollout is resumable: run the same command again: connection refused"},
		{"API down while rolling back", rollout.Status{}, &rollout.APIUnavailableError{For: 2 * time.Minute, RollingBack: true, Err: apiDown}, true, exitRollbackIncomplete,
			"rollback incomplete: giving up after 2m of errors from the API server; run `inplace-rollout rollback` again to finish it: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := &cobra.Command{}
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			d := newDriver(cmd, nil, nil, target, nil, nil)
			err := d.finish(tt.st, tt.err, "", "text", tt.rollbackCmd)
			if tt.code == exitSucceeded {
				if err != nil {
					t.Fatalf("finish: %v, want success", err)
				}
				return
			}
			if got := exitCode(err); got != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("finish: exit %d, %v; want exit %d and %q", got, err, tt.code, tt.msg)
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{2 * time.Minute: "2m", 90 * time.Second: "1m30s", time.Hour: "1h", 45 * time.Second: "45s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestReadExit: status and plan tell what they were given wrong (exit 2) from a read the API
// server refused (exit 7) and from a server that could not answer (exit 6).
func TestReadExit(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	refusedConn := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"workload not found", apierrors.NewNotFound(gr, "web"), exitBadInput},
		{"spec refused by the engine", &rollout.InvalidError{Msg: "no images"}, exitBadInput},
		{"spec refused over a registry's connection error", fmt.Errorf("resolving: %w", &rollout.InvalidError{Msg: "registry unreachable: " + refusedConn.Error()}), exitBadInput},
		{"forbidden", apierrors.NewForbidden(gr, "web", errors.New("RBAC")), exitAPIRefused},
		{"unauthorized", apierrors.NewUnauthorized("token expired"), exitAPIRefused},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), exitAPIUnavailable},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), exitAPIUnavailable},
		{"server timeout", apierrors.NewServerTimeout(gr, "get", 1), exitAPIUnavailable},
		{"connection refused", fmt.Errorf("reading StatefulSet shop/web: %w", refusedConn), exitAPIUnavailable},
		{"untrusted certificate", &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: x509.UnknownAuthorityError{}}, exitBadInput},
		{"anything else", errors.New("pod web-0 has no container app"), exitBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(readExit(tc.err)); got != tc.want {
				t.Errorf("exit %d for %v, want %d", got, tc.err, tc.want)
			}
		})
	}
}
