package argo_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestStepAbortSurvivesPluginKilled kills the plugin processes while Argo's Abort call rolls
// the pods back. Argo calls Abort once and never again: the call fails with the process, and
// the next reconcile of the aborted Rollout, which resolves its steps' plugin, starts a new
// process, whose scan at start finds the rollback cut short and finishes it. Every pod ends on
// its old image, with no container restarted more than once per image change. It kills
// processes: not parallel.
func TestStepAbortSurvivesPluginKilled(t *testing.T) {
	began := time.Now()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	restarts := appRestarts(t, ns, "web")
	history := recordImages(t, ns, "web")
	churnPods(t, ns, "web")
	// A grace period of a few seconds per pod makes the rollback long enough to be cut.
	steps := oneStep("web", map[string]any{"gracePeriod": "3s"})
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	cluster.WaitFor(t, 3*time.Minute, "three pods of web on "+clitest.AppV2, func(context.Context) (bool, error) {
		return specImages(t, ns, "web", clitest.AppV2) >= 3, nil
	})
	argoRollouts(t, "abort", "web", "-n", ns)

	// The lock turns RollingBack when Abort's rollback starts; the first pod back takes the
	// grace period at least.
	cluster.WaitFor(t, time.Minute, "the rollback of web under way", func(context.Context) (bool, error) {
		l := lockOf(t, ns, "web")
		return l != nil && l.Phase == rollout.PhaseRollingBack, nil
	})
	offset := argoLogSize(t)
	killed, err := env.Argo.KillPlugins()
	if err != nil {
		t.Fatal(err)
	}
	if len(killed) == 0 {
		t.Fatal("no plugin process to kill")
	}
	left := specImages(t, ns, "web", clitest.AppV2)
	if l := lockOf(t, ns, "web"); left == 0 || l == nil || l.Phase != rollout.PhaseRollingBack {
		t.Fatalf("the rollback was over when the plugin processes were killed (%d pods on %s, lock %+v): the test proves nothing", left, clitest.AppV2, l)
	}
	t.Logf("killed plugin processes %v mid-Abort with %d pods still on %s", killed, left, clitest.AppV2)

	abortedOn(t, ns, "web", old)
	waitRolledBack(t, ns, "web", before, 3*time.Minute)
	if n := specImages(t, ns, "web", clitest.AppV2); n != 0 {
		t.Errorf("%d pods' specs still on %s", n, clitest.AppV2)
	}
	cluster.WaitFor(t, time.Minute, "the lock of web RolledBack", func(context.Context) (bool, error) {
		l := lockOf(t, ns, "web")
		return l != nil && l.Phase == rollout.PhaseRolledBack, nil
	})
	checkHistory(t, ns, "web", history, restarts, true)

	// Proof of who finished it: a new plugin process, whose scan says so.
	pids, err := env.Argo.PluginPIDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if slices.Contains(killed, pid) {
			t.Errorf("plugin process %d survived SIGKILL", pid)
		}
	}
	if lines := linesWith(argoLog(t, offset), "finishing a rollback cut short", ns+"/web"); len(lines) == 0 {
		t.Errorf("the controller log has no line of a new plugin process finishing the rollback of %s/web", ns)
	} else {
		t.Logf("%s", lines[0])
	}
	t.Logf("rollout, abort, plugin killed, rollback finished in %s", time.Since(began).Round(100*time.Millisecond))
}
