package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestVersionAndHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "inplace-rollout dev"},
		{[]string{"--help"}, "Exit codes: 0 succeeded"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			cmd := newRootCommand()
			cmd.SetOut(&out)
			cmd.SetArgs(tt.args)
			if err := cmd.Execute(); err != nil {
				t.Fatalf("execute %v: %v", tt.args, err)
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("output of %v = %q, want it to contain %q", tt.args, out.String(), tt.want)
			}
		})
	}
}

func TestUnknownCommandIsBadInput(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"frobnicate"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("unknown command succeeded")
	}
	if got := exitCode(err); got != exitBadInput {
		t.Errorf("exit code = %d, want %d", got, exitBadInput)
	}
	if got := exitCode(&exitError{code: exitFailedRolledBack, err: errors.New("x")}); got != exitFailedRolledBack {
		t.Errorf("exit code of exitError = %d, want %d", got, exitFailedRolledBack)
	}
}

// TestPlanTakesOnlyWhatChoosesPodsAndBatches: plan writes nothing, so its help lists only the
// flags that decide which pods change in which batches, and run's own flags are refused.
func TestPlanTakesOnlyWhatChoosesPodsAndBatches(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"plan", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--image", "--batches", "--include-init", "--target", "--selector"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan --help lacks %s:\n%s", want, out.String())
		}
	}
	for _, runOnly := range []string{"--soak", "--grace", "--timeout", "--max-unavailable", "--analysis", "--prometheus", "--on-inconclusive", "--supersede", "--results-dir", "--allow-unready"} {
		if strings.Contains(out.String(), runOnly) {
			t.Errorf("plan --help lists run's flag %s:\n%s", runOnly, out.String())
		}
	}
	cmd = newRootCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"plan", "--target", "statefulset/web", "--image", "app=reg/app:v2", "--soak", "1m"})
	if err := cmd.Execute(); err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "soak") {
		t.Errorf("plan --soak: %v (exit %d), want bad input naming the flag", err, exitCode(err))
	}
}
