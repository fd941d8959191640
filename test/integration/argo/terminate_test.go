package argo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestStepPromoteFullTerminates: `kubectl argo rollouts promote --full` while the step is still
// Running makes Argo call Terminate: the step's rollout goes on to every remaining pod at once,
// in place, with no soak, and the StatefulSet is handed back with its template on the images
// every pod runs; no pod is recreated, and the Rollout ends Healthy.
func TestStepPromoteFullTerminates(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	// A long soak keeps the step Running once the first pod is updated.
	steps := oneStep("web", map[string]any{"soak": "2m", "timeout": "5m"})
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	cluster.WaitFor(t, 2*time.Minute, "the first pod of web updated in place", func(context.Context) (bool, error) {
		n, _ := podsOn(t, ns, "web", clitest.AppV2)
		return n >= 1, nil
	})
	if n, _ := podsOn(t, ns, "web", clitest.AppV2); n == replicas {
		t.Fatal("every pod was updated before the promotion: the test proves nothing")
	}
	uids := map[string]string{}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		uids[p.Name] = string(p.UID)
	}

	argoRollouts(t, "promote", "--full", "web", "-n", ns)
	ro := healthyOn(t, ns, "web", old)
	terminated := false
	for _, sp := range ro.Status.Canary.StepPluginStatuses {
		if sp.Operation == rolloutsv1alpha1.StepPluginOperationTerminate {
			terminated = true
			if sp.Phase != rolloutsv1alpha1.StepPluginPhaseSuccessful {
				t.Errorf("Terminate ended %s: %s", sp.Phase, sp.Message)
			}
		}
	}
	if !terminated {
		t.Errorf("Argo did not call Terminate: %s", describeRollout(ro))
	}
	promotedInPlace(t, ns, uids, time.Minute)
}

// promotedInPlace waits until every pod of StatefulSet web runs the new images, the same pods
// as uids names, the lock Succeeded and the StatefulSet has its RollingUpdate back with every
// replica current.
func promotedInPlace(t *testing.T, ns string, uids map[string]string, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, "the lock of web Succeeded", func(context.Context) (bool, error) {
		l := lockOf(t, ns, "web")
		if l == nil || l.Phase != rollout.PhaseSucceeded {
			return false, fmt.Errorf("lock %+v", l)
		}
		return true, nil
	})
	clitest.WaitStatefulSet(t, env, ns, "web", "its own RollingUpdate back and every replica current on the new images",
		func(s *appsv1.StatefulSet) bool {
			return s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
				s.Spec.Template.Spec.Containers[0].Image == clitest.AppV2 &&
				s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == replicas && s.Status.ReadyReplicas == replicas
		})
	n, after := podsOn(t, ns, "web", clitest.AppV2)
	if n != replicas {
		t.Errorf("%d of %d pods on %s", n, replicas, clitest.AppV2)
	}
	for pod, uid := range uids {
		if after[pod] != uid {
			t.Errorf("pod %s was recreated (UID %s, now %s)", pod, uid, after[pod])
		}
	}
}

// TestStepPromoteFullAtPausePromotes: `promote --full` at Argo's pause between two upTo steps
// leaves no step Running, so Argo calls no Terminate; the plugin's scan, within its minute,
// promotes the rollout held for the Rollout to every pod, in place, just as Terminate would.
func TestStepPromoteFullAtPausePromotes(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	steps := func(image string) []map[string]any {
		return []map[string]any{stepConfig("web", image, map[string]any{"upTo": 1}), nil, stepConfig("web", image, nil)}
	}
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	waitRollout(t, ns, "web", 3*time.Minute, "paused after the hold", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhasePaused &&
			ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == 1
	})
	if l := lockOf(t, ns, "web"); l == nil || l.Phase != rollout.PhaseHolding {
		t.Fatalf("lock %+v at the pause, want Holding", l)
	}

	uids := map[string]string{}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		uids[p.Name] = string(p.UID)
	}
	argoRollouts(t, "promote", "--full", "web", "-n", ns)
	healthyOn(t, ns, "web", old)
	// The scan runs every minute: two of them at most, and the rest of the pods.
	promotedInPlace(t, ns, uids, 3*time.Minute)
}
