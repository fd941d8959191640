package argo_test

import (
	"context"
	"maps"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestStepRetryAfterAbort: kubectl argo rollouts abort mid-rollout rolls the pods back, and
// kubectl argo rollouts retry then starts over: every pod goes to the new image and the Rollout
// ends Healthy.
func TestStepRetryAfterAbort(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	steps := oneStep("web", map[string]any{"soak": "5s"})
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	cluster.WaitFor(t, 2*time.Minute, "a pod of web on "+clitest.AppV2, func(context.Context) (bool, error) {
		return specImages(t, ns, "web", clitest.AppV2) > 0, nil
	})
	if n := specImages(t, ns, "web", clitest.AppV2); n == replicas {
		t.Fatalf("every pod was on %s before the abort: the test proves nothing", clitest.AppV2)
	}
	argoRollouts(t, "abort", "web", "-n", ns)
	abortedOn(t, ns, "web", old)
	waitRolledBack(t, ns, "web", before, 2*time.Minute)

	argoRollouts(t, "retry", "rollout", "web", "-n", ns)
	waitRollout(t, ns, "web", 3*time.Minute, "Healthy on the new revision after the retry", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && !ro.Status.Abort && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
	n, uids := podsOn(t, ns, "web", clitest.AppV2)
	if n != replicas {
		t.Errorf("%d of %d pods Running and Ready on %s after the retry", n, replicas, clitest.AppV2)
	}
	want := map[string]string{}
	for pod, st := range before {
		want[pod] = st.uid
	}
	if !maps.Equal(want, uids) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", want, uids)
	}
	t.Logf("rollout, abort, rollback, retry and rollout in %s", time.Since(began).Round(100*time.Millisecond))
}
