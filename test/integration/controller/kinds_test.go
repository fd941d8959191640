package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestRollsEachKind: InPlaceRollout objects roll a DaemonSet, a Deployment (with prePull) and
// label-selected Pods behind the readiness gate in place, every pod on the new image with its
// UID, while someone else writes the pods; no puller pod outlives the rollout. A second selector
// taking the Pods of the first removes the first one's lock. Besides showing
// each kind works through the controller, it makes the controller use the rules of
// config/controller that only these cases need, for the RBAC check.
func TestRollsEachKind(t *testing.T) {
	type run struct{ target, image string }
	tests := []struct {
		name   string
		extra  string // a spec line
		create func(t *testing.T, ns string)
		pods   int
		runs   []run // in order, each by an object of its own
	}{
		{"DaemonSet", "", func(t *testing.T, ns string) {
			clitest.CreateDaemonSet(t, env, ns, "agent")
		}, len(env.Sim.NodeNames()), []run{{"{kind: DaemonSet, name: agent}", clitest.AppV2}}},
		{"Deployment with prePull", "prePull: true", func(t *testing.T, ns string) {
			clitest.CreateDeployment(t, env, ns, "agent", 3)
		}, 3, []run{{"{kind: Deployment, name: agent}", clitest.AppV2}}},
		{"gated Pods, then a second selector", "gracePeriod: 1s", func(t *testing.T, ns string) {
			clitest.CreatePods(t, env, ns, "agent", 3, true)
		}, 3, []run{
			{`{kind: Pods, selector: "app=agent"}`, clitest.AppV2},
			{`{kind: Pods, selector: "app=agent,tier=web"}`, clitest.AppV3},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			tt.create(t, ns)
			before := recordPods(t, ns, "agent")
			if len(before) != tt.pods {
				t.Fatalf("%d pods of agent, want %d", len(before), tt.pods)
			}
			clitest.ChurnPods(t, env, ns, "app=agent", 20*time.Millisecond)
			for i, r := range tt.runs {
				name := fmt.Sprintf("roll-%d", i)
				applyRollout(t, ns, name, fmt.Sprintf("  target: %s\n  images: {app: %q}\n  batches: [1, \"100%%\"]\n  soak: 1s\n  timeout: 2m\n  %s", r.target, r.image, tt.extra))
				mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/"+name, "-n", ns, "--timeout=3m")
				on := 0
				for _, p := range clitest.ListPods(t, env, ns, "app=agent") {
					if p.Spec.Containers[0].Image == r.image {
						on++
					}
				}
				if on != tt.pods {
					t.Errorf("after InPlaceRollout %s, %d of %d pods on %s", name, on, tt.pods, r.image)
				}
			}
			checkSamePods(t, ns, "agent", before, false)
			left, err := prepull.List(t.Context(), env.Client, ns, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("%d puller pods outlive the rollout, e.g. %s", len(left), left[0].Name)
			}
		})
	}
}
