package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitsZeroOnSignal runs the built binary and stops it with each signal a runtime sends.
func TestExitsZeroOnSignal(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			// The signal handler is installed before the line is written.
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if !strings.Contains(line, "waiting") {
				t.Fatalf("pause's first line %q (%v), want it to say it is waiting", line, err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause after %s: %v, want exit 0", sig, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("pause still running 5 s after %s", sig)
			}
		})
	}
}
