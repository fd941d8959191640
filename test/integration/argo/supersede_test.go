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

// appV3 is a third good image, for a second change mid-rollout.
const appV3 = "registry.example/app:v3"

// TestStepSecondImageChange changes the Rollout's image to v2, then to v3 while v2's second
// batch of three is in flight: Argo restarts the steps with no Abort and the step supersedes
// the rollout under way. The newest images win, with no pod given an image twice and no
// container restarted more than once per image; or an abort after the second change returns
// every pod to v1, the image it ran before the first change.
func TestStepSecondImageChange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		abort bool
	}{
		{"the newest images win", false},
		{"an abort returns every pod to its image before the first change", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			ns := env.Namespace(t)
			clitest.CreateStatefulSet(t, env, ns, "web", replicas)
			before := podStates(t, ns, "web")
			restarts := appRestarts(t, ns, "web")
			history := recordImages(t, ns, "web")
			// A soak that keeps each batch in flight for a while after its last pod.
			steps := oneStep("web", map[string]any{"soak": "5s"})
			createRollout(t, ns, "web", clitest.AppV1, steps)

			setImage(t, ns, "web", clitest.AppV2, steps)
			// Batch 1 is one pod: a second pod on v2 is batch 2.
			cluster.WaitFor(t, 2*time.Minute, "batch 2 of 3 on "+clitest.AppV2, func(context.Context) (bool, error) {
				return specImages(t, ns, "web", clitest.AppV2) >= 2, nil
			})
			if n := specImages(t, ns, "web", clitest.AppV2); n == replicas {
				t.Fatalf("every pod was on %s before the second change: the test proves nothing", clitest.AppV2)
			}
			v2 := setImage(t, ns, "web", appV3, steps)
			onV3 := func(ro *rolloutsv1alpha1.Rollout) bool { return onNewRevision(ro, v2) }

			if !tt.abort {
				waitRollout(t, ns, "web", 3*time.Minute, "Healthy on v3", func(ro *rolloutsv1alpha1.Rollout) bool {
					return onV3(ro) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
				})
				n, uids := podsOn(t, ns, "web", appV3)
				if n != replicas {
					t.Errorf("%d of %d pods Running and Ready on %s", n, replicas, appV3)
				}
				want := map[string]string{}
				for pod, st := range before {
					want[pod] = st.uid
				}
				if !maps.Equal(want, uids) {
					t.Errorf("pods were recreated: UIDs before %v, after %v", want, uids)
				}
				if l := lockOf(t, ns, "web"); l == nil || l.PreviousImages["app"] != clitest.AppV1 {
					t.Errorf("lock %+v: want the images before the first change, app=%s, as the ones to go back to", l, clitest.AppV1)
				}
				checkHistory(t, ns, "web", history, restarts, false)
				t.Logf("v1 to v3 through a superseded v2 in %s", time.Since(began).Round(100*time.Millisecond))
				return
			}

			cluster.WaitFor(t, 2*time.Minute, "a pod on "+appV3, func(context.Context) (bool, error) {
				return specImages(t, ns, "web", appV3) > 0, nil
			})
			argoRollouts(t, "abort", "web", "-n", ns)
			waitRollout(t, ns, "web", 3*time.Minute, "Degraded, aborted", func(ro *rolloutsv1alpha1.Rollout) bool {
				return onV3(ro) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseDegraded && ro.Status.Abort
			})
			waitRolledBack(t, ns, "web", before, 2*time.Minute)
			for _, img := range []string{clitest.AppV2, appV3} {
				if n := specImages(t, ns, "web", img); n != 0 {
					t.Errorf("%d pods' specs still on %s", n, img)
				}
			}
			checkHistory(t, ns, "web", history, restarts, true)
			t.Logf("v1, v2, v3 and back to v1 in %s", time.Since(began).Round(100*time.Millisecond))
		})
	}
}
