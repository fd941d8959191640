package rollout_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStatusWatchFollowsTheRollout: `status --watch`, started before a rollout, prints the row
// of each pod as it is updated and the rollout's line when it succeeds, and exits 0 when
// interrupted.
func TestStatusWatchFollowsTheRollout(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	cmd := exec.Command(cli, "status", "--watch", "-n", ns, "--target", "statefulset/web")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	// waitFor reads the lines printed until those printed so far satisfy done.
	var printed []string
	waitFor := func(what string, done func() bool) {
		t.Helper()
		// A bound on a hang, not a measure of speed: the watch prints within a second.
		deadline := time.After(2 * time.Minute)
		for !done() {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("status --watch ended before it printed %s; it printed:\n%s", what, strings.Join(printed, "\n"))
				}
				printed = append(printed, l)
			case <-deadline:
				t.Fatalf("status --watch did not print %s; it printed:\n%s", what, strings.Join(printed, "\n"))
			}
		}
	}
	waitFor("the report", func() bool { return anyLine(printed, "POD", "STAGE") })

	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,100%")
	if r.Code != 0 {
		t.Fatalf("run: %s; want exit 0", r)
	}
	// Started before the rollout, the watch prints each pod's row again once it is Updated,
	// and the rollout's line once it succeeded.
	waitFor("the rollout succeeded with every pod Updated", func() bool {
		return anyLine(printed, ": Succeeded") && anyLine(printed, "web-0 ", "Updated") &&
			anyLine(printed, "web-1 ", "Updated") && anyLine(printed, "web-2 ", "Updated")
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		printed = append(printed, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("status --watch, interrupted: %v; want exit 0", err)
	}
	if t.Failed() {
		t.Logf("status --watch printed:\n%s", strings.Join(printed, "\n"))
	}
}

// anyLine reports whether one of lines contains every part.
func anyLine(lines []string, parts ...string) bool {
	for _, l := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
