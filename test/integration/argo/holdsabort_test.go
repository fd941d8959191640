package argo_test

import (
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestStepAbortAfterTwoHoldsRollsBackOnce: two upTo steps with Argo pauses after each; an abort
// at the second pause makes Argo call Abort on both steps, last first. The touched pods go back
// to their old image once: each container restarts once for the update and once for the
// rollback, and the untouched pods not at all.
func TestStepAbortAfterTwoHoldsRollsBackOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	restarts := appRestarts(t, ns, "web")
	steps := func(image string) []map[string]any {
		return []map[string]any{
			stepConfig("web", image, map[string]any{"upTo": 1}), nil,
			stepConfig("web", image, map[string]any{"upTo": "50%"}), nil,
			stepConfig("web", image, nil),
		}
	}
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	atPause := func(index int32) func(*rolloutsv1alpha1.Rollout) bool {
		return func(ro *rolloutsv1alpha1.Rollout) bool {
			return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhasePaused &&
				ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == index
		}
	}
	waitRollout(t, ns, "web", 3*time.Minute, "paused after the first hold", atPause(1))
	argoRollouts(t, "promote", "web", "-n", ns)
	waitRollout(t, ns, "web", 3*time.Minute, "paused after the second hold", atPause(3))
	if n, _ := podsOn(t, ns, "web", clitest.AppV2); n != replicas/2 {
		t.Fatalf("%d pods on %s at the second pause, want %d", n, clitest.AppV2, replicas/2)
	}
	touched := map[string]bool{}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		touched[p.Name] = p.Spec.Containers[0].Image == clitest.AppV2
	}

	argoRollouts(t, "abort", "web", "-n", ns)
	// Argo may persist the abort before it calls Abort on the steps, which it records after.
	ro := waitRollout(t, ns, "web", 2*time.Minute, "Degraded, aborted, Abort called on both holds", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseDegraded && ro.Status.Abort &&
			len(abortsOf(ro)) == 2
	})
	for _, sp := range abortsOf(ro) {
		if sp.Phase != rolloutsv1alpha1.StepPluginPhaseSuccessful {
			t.Errorf("Abort of step %d ended %s: %s", sp.Index, sp.Phase, sp.Message)
		}
	}
	waitRolledBack(t, ns, "web", before, time.Minute)
	for pod, r := range appRestarts(t, ns, "web") {
		want := restarts[pod]
		if touched[pod] {
			want += 2
		}
		if r != want {
			t.Errorf("pod %s: app container restart count %d, want %d (updated before the abort: %v)", pod, r, want, touched[pod])
		}
	}
}

// abortsOf lists the Rollout's step plugin statuses of Abort calls.
func abortsOf(ro *rolloutsv1alpha1.Rollout) []rolloutsv1alpha1.StepPluginStatus {
	var out []rolloutsv1alpha1.StepPluginStatus
	for _, sp := range ro.Status.Canary.StepPluginStatuses {
		if sp.Operation == rolloutsv1alpha1.StepPluginOperationAbort {
			out = append(out, sp)
		}
	}
	return out
}
