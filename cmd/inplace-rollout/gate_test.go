package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestGateControllerBadSelectorIsBadInput(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"gate-controller", "--selector", "app in ("})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), "--selector") {
		t.Fatalf("gate-controller with a bad selector: %v (exit %d), want exit %d naming --selector", err, exitCode(err), exitBadInput)
	}
}
