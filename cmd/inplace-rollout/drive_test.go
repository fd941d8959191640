package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	pt "github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

// testCommand is a command whose stdout and stderr the test reads.
func testCommand() (*cobra.Command, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	return cmd, &out, &errOut
}

// cliSpec is the spec run builds for `--target statefulset/web --image app=IMAGE --batches
// 1,100%`, without digest pinning: the fake cluster has no registry.
func cliSpec(image string) rollout.Spec {
	return rollout.Spec{Target: rollout.Ref{Kind: rollout.StatefulSet, Namespace: pt.Namespace, Name: pt.StsName},
		Images: map[string]string{pt.Container: image}, Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")},
		MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute, Holder: "cli", PinDigests: rollout.PinNever, Rerun: true}
}

// TestDriveAndRollBack runs the commands' loops against a fake cluster: run succeeds (exit 0)
// and writes its results, rollback puts the pods back (exit 0), and a rollout that fails rolls
// back and exits 1.
func TestDriveAndRollBack(t *testing.T) {
	client := pt.NewClient(t, 2)
	pt.PlayKubelet(t, client)
	results := t.TempDir()

	cmd, out, progress := testCommand()
	if err := drive(cmd, client, nil, cliSpec(pt.ImageV2), driveOptions{resultsDir: results, output: "text"}); err != nil {
		t.Fatalf("run: %v (exit %d)", err, exitCode(err))
	}
	if !strings.HasPrefix(out.String(), "Succeeded: ") || !strings.Contains(progress.String(), "msg=progress") {
		t.Errorf("run printed %q, progress %q; want Succeeded and progress lines", out.String(), progress.String())
	}
	if phase, err := os.ReadFile(filepath.Join(results, "phase")); err != nil || string(phase) != "Succeeded" {
		t.Errorf("result phase %q, %v; want Succeeded", phase, err)
	}
	if got := pt.PodImages(t, client); !strings.Contains(strings.Join(got, " "), pt.ImageV2) {
		t.Errorf("pods %v, want them on %s", got, pt.ImageV2)
	}

	cmd, out, _ = testCommand()
	if err := driveRollback(cmd, client, nil, cliSpec(pt.ImageV2).Rollback(), "", "json"); err != nil {
		t.Fatalf("rollback: %v (exit %d)", err, exitCode(err))
	}
	var st rollout.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Phase != rollout.PhaseRolledBack {
		t.Errorf("rollback printed %q (%v), want a RolledBack status in JSON", out.String(), err)
	}

	cmd, _, _ = testCommand()
	err := drive(cmd, client, nil, cliSpec(pt.ImageCrash), driveOptions{resume: true, output: "text"})
	if got := exitCode(err); err == nil || got != exitFailedRolledBack || !strings.Contains(err.Error(), "rolled back") {
		t.Errorf("a rollout that crashes: %v (exit %d), want exit %d, rolled back", err, got, exitFailedRolledBack)
	}
}

// TestFinishOutcomes: what finish prints and exits with for the outcomes TestFinishMapsWhatTheEngineReturns
// leaves out, and the results it writes.
func TestFinishOutcomes(t *testing.T) {
	target := rollout.Ref{Kind: rollout.StatefulSet, Namespace: "shop", Name: "web"}
	images := map[string]string{"app": "reg/app:v2"}
	tests := []struct {
		name        string
		st          rollout.Status
		err         error
		rollbackCmd bool
		code        int
		msg         string
		// stdout, when set, is in what finish prints; phase the result it writes.
		stdout, phase string
	}{
		{name: "untyped error", err: errors.New("EOF"), code: exitAPIUnavailable, msg: "EOF"},
		{name: "released", st: rollout.Status{Phase: rollout.PhaseReleased, Message: "rollout r1 was released"}, code: exitRollbackIncomplete,
			msg: "rollout r1 was released", stdout: "Released: rollout r1 was released", phase: "Released"},
		{name: "ended short of a verdict", st: rollout.Status{Phase: rollout.PhaseRollingBack, Message: "rolling back"}, code: exitRollbackIncomplete, msg: "rolling back"},
		{name: "template changed", st: rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, Message: "someone changed the template",
			PreviousImages: map[string]string{"app": "reg/app:v1"}}, code: exitRollbackIncomplete,
			msg:    "someone changed the template: to keep that change, `inplace-rollout rollback --target statefulset/web -n shop` puts the pods back on {\"app\":\"reg/app:v1\"}",
			stdout: "Failed (TemplateChanged): someone changed the template: to keep that change", phase: "Failed"},
		{name: "paused", st: rollout.Status{Phase: rollout.PhasePaused, Reason: rollout.ReasonAnalysisInconclusive, Message: "batch 1 inconclusive"}, code: exitPaused,
			msg: "batch 1 inconclusive. To accept the batch and go on, run `inplace-rollout resume`", stdout: "Paused (AnalysisInconclusive): batch 1 inconclusive"},
		{name: "holding", st: rollout.Status{Phase: rollout.PhaseHolding, Message: "holding at 1 of 2"}, code: exitSucceeded,
			stdout: "Holding: holding at 1 of 2. To go on, run the same command again without --up-to", phase: "Holding"},
		{name: "rolled back by rollback", st: rollout.Status{Phase: rollout.PhaseRolledBack, Message: "rollout r1 is rolled back"}, rollbackCmd: true, code: exitSucceeded,
			stdout: "RolledBack: rollout r1 is rolled back", phase: "RolledBack"},
		{name: "interrupted", st: rollout.Status{Phase: rollout.PhaseProgressing, Updated: 1}, err: fmt.Errorf("stopped: %w", context.Canceled), code: exitInterrupted,
			msg: "Run the same command again to resume", phase: "Progressing"},
		{name: "bad input with a fix", err: fmt.Errorf("starting: %w", &rollout.InvalidError{Msg: "2 pods are not Ready", Fix: rollout.FixAllowUnready}), code: exitBadInput,
			msg: "starting: 2 pods are not Ready, or pass --allow-unready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, out, _ := testCommand()
			d := newDriver(cmd, nil, nil, target, images, nil)
			results := t.TempDir()
			err := d.finish(tt.st, tt.err, results, "text", tt.rollbackCmd)
			switch got := exitCode(err); {
			case tt.code == exitSucceeded && err != nil:
				t.Errorf("finish: %v (exit %d), want success", err, got)
			case tt.code != exitSucceeded && (err == nil || got != tt.code || !strings.Contains(err.Error(), tt.msg)):
				t.Errorf("finish: %v (exit %d), want exit %d and %q", err, got, tt.code, tt.msg)
			}
			if !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("printed %q, want %q", out.String(), tt.stdout)
			}
			if tt.phase != "" {
				if phase, err := os.ReadFile(filepath.Join(results, "phase")); err != nil || string(phase) != tt.phase {
					t.Errorf("result phase %q, %v; want %q", phase, err, tt.phase)
				}
			}
		})
	}
}

// TestFinishResultsUnwritable: results that cannot be written are a failure a person must look
// at, whatever the rollout did.
func TestFinishResultsUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _, _ := testCommand()
	d := newDriver(cmd, nil, nil, rollout.Ref{Kind: rollout.StatefulSet, Namespace: "shop", Name: "web"}, nil, nil)
	if err := d.finish(rollout.Status{Phase: rollout.PhaseSucceeded}, nil, filepath.Join(file, "results"), "text", false); exitCode(err) != exitRollbackIncomplete {
		t.Errorf("finish: %v (exit %d), want exit %d", err, exitCode(err), exitRollbackIncomplete)
	}
}

// TestReportPrintsMeasurements: each new measurement of a batch's analysis is one line per
// check; a status seen again prints nothing new.
func TestReportPrintsMeasurements(t *testing.T) {
	cmd, _, progress := testCommand()
	d := newDriver(cmd, nil, nil, rollout.Ref{Kind: rollout.StatefulSet, Namespace: "shop", Name: "web"}, nil, nil)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1, Batches: 2, Total: 2, Updated: 1, Message: "analyzing batch 1",
		Analysis: &analysis.Run{Batch: 1, Last: []analysis.Measurement{{At: at, Results: []analysis.CheckResult{{Check: "errors", Verdict: analysis.Pass}}}}}}
	d.report(st)
	d.report(st)
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "msg=progress") || !strings.Contains(lines[0], "batch=1/2") ||
		!strings.Contains(lines[1], "msg=measurement") || !strings.Contains(lines[1], "check=errors") {
		t.Errorf("report printed %q, want one progress line and one measurement line", progress.String())
	}
}
