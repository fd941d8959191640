package argo_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const replicas = 6

// oneStep is a Rollout with a single plugin step that rolls the whole StatefulSet target.
func oneStep(target string, extra map[string]any) stepsFunc {
	return func(image string) []map[string]any {
		return []map[string]any{stepConfig(target, image, extra)}
	}
}

// TestStepRollsAStatefulSetInPlace: a new image in the Rollout rolls a 6-pod StatefulSet in
// place through all its batches; the Rollout ends Healthy, every pod keeps its UID and the
// StatefulSet counts them updated. The same rollout by the CLI is timed alongside.
func TestStepRollsAStatefulSetInPlace(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	clitest.CreateStatefulSet(t, env, ns, "cli", replicas)
	_, before := podsOn(t, ns, "web", clitest.AppV1)

	createRollout(t, ns, "web", clitest.AppV1, oneStep("web", nil))
	began := time.Now()
	old := setImage(t, ns, "web", clitest.AppV2, oneStep("web", nil))
	healthyOn(t, ns, "web", old)
	argoTook := time.Since(began)

	n, after := podsOn(t, ns, "web", clitest.AppV2)
	if n != replicas {
		t.Errorf("%d of %d pods Running and Ready on %s", n, replicas, clitest.AppV2)
	}
	if !maps.Equal(before, after) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", before, after)
	}
	clitest.WaitStatefulSet(t, env, ns, "web", "every replica counted updated on one revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == replicas && s.Status.CurrentRevision == s.Status.UpdateRevision
	})

	// The step plugin process counts the pods it updated, for the target's namespace and
	// workload, on the /metrics the controller's environment gave it.
	if want := fmt.Sprintf(`inplace_rollout_pods_updated_total{namespace=%q,workload="StatefulSet/web"} %d`, ns, replicas); !strings.Contains(cluster.Scrape(t, env.Argo.StepMetricsURL), want) {
		t.Errorf("the step plugin's /metrics has no %s", want)
	}

	began = time.Now()
	r := clitest.Run(t, env, cli, "run", "-n", ns, "--target", "statefulset/cli", "--image", "app="+clitest.AppV2,
		"--batches", "1,50%,100%", "--grace", "1s", "--soak", "1s", "--timeout", "2m")
	cliTook := time.Since(began)
	if r.Code != 0 {
		t.Fatalf("the CLI's rollout: %s", r)
	}
	t.Logf("6 pods in 3 batches: through Argo (template change to Healthy) %s, by the CLI %s",
		argoTook.Round(100*time.Millisecond), cliTook.Round(100*time.Millisecond))
}

// TestStepUpToThenPause: an upTo step of 33% holds the target at 2 of 6 pods while Argo's pause
// step waits; kubectl argo rollouts promote goes on, and the last step rolls the rest. The pods
// are written to all along, as a kubelet would, so the plugin meets conflicts.
func TestStepUpToThenPause(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	churnPods(t, ns, "web")
	steps := func(image string) []map[string]any {
		return []map[string]any{stepConfig("web", image, map[string]any{"upTo": "33%"}), nil, stepConfig("web", image, nil)}
	}
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	waitRollout(t, ns, "web", 3*time.Minute, "paused at its pause step", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhasePaused &&
			ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == 1
	})
	if n, _ := podsOn(t, ns, "web", clitest.AppV2); n != 2 {
		t.Errorf("%d pods on %s at the pause, want 2 (33%% of 6, rounded up)", n, clitest.AppV2)
	}
	if n := specImages(t, ns, "web", clitest.AppV2); n != 2 {
		t.Errorf("%d pods' specs on %s at the pause, want 2", n, clitest.AppV2)
	}

	argoRollouts(t, "promote", "web", "-n", ns)
	healthyOn(t, ns, "web", old)
	if n, _ := podsOn(t, ns, "web", clitest.AppV2); n != replicas {
		t.Errorf("%d of %d pods on %s after promote", n, replicas, clitest.AppV2)
	}
}

// TestStepCrashFailsAndRollsBack: a crash-looping image fails the step, Argo aborts the Rollout
// (Degraded) and every pod is back on its old image.
func TestStepCrashFailsAndRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	const crash = "registry.example/app:crash"
	createRollout(t, ns, "web", clitest.AppV1, oneStep("web", nil))
	old := setImage(t, ns, "web", crash, oneStep("web", nil))
	ro := abortedOn(t, ns, "web", old)
	failed := false
	for _, sp := range ro.Status.Canary.StepPluginStatuses {
		if sp.Operation == rolloutsv1alpha1.StepPluginOperationRun && sp.Phase == rolloutsv1alpha1.StepPluginPhaseFailed {
			failed = true
		}
	}
	if !failed {
		t.Errorf("no Run of the step ended Failed: %s", describeRollout(ro))
	}
	waitRolledBack(t, ns, "web", before, time.Minute)
	if n := specImages(t, ns, "web", crash); n != 0 {
		t.Errorf("%d pods' specs still on %s", n, crash)
	}
}

// TestStepAbortMidBatchRollsBack: kubectl argo rollouts abort while a batch is in flight rolls
// every pod back to its old image.
func TestStepAbortMidBatchRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	// A slow image takes 10 s to become ready, which keeps the batch in flight.
	const slow = "registry.example/app:slow-v2"
	createRollout(t, ns, "web", clitest.AppV1, oneStep("web", nil))
	old := setImage(t, ns, "web", slow, oneStep("web", nil))
	cluster.WaitFor(t, time.Minute, "a pod of web updated to "+slow, func(context.Context) (bool, error) {
		return specImages(t, ns, "web", slow) > 0, nil
	})
	argoRollouts(t, "abort", "web", "-n", ns)
	abortedOn(t, ns, "web", old)
	waitRolledBack(t, ns, "web", before, time.Minute)
	if n := specImages(t, ns, "web", slow); n != 0 {
		t.Errorf("%d pods' specs still on %s", n, slow)
	}
}
