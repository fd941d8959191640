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
