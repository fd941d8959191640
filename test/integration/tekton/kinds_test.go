package tekton_test

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestCustomRunRollsEachKind: a CustomRun rolls a DaemonSet, a Deployment (with prePull) and
// label-selected Pods in place, every pod on the new image with its UID; no puller pod outlives
// the run. Besides showing each kind works through the controller, it makes the controller
// use the rules of config/tekton that only these kinds need, for the RBAC check.
func TestCustomRunRollsEachKind(t *testing.T) {
	tests := []struct {
		name   string
		target string // the task's spec.target
		extra  string // more spec fields, YAML lines indented for the spec
		create func(t *testing.T, ns string)
		pods   int
	}{
		{"DaemonSet", "{kind: DaemonSet, name: agent}", "", func(t *testing.T, ns string) {
			clitest.CreateDaemonSet(t, env, ns, "agent")
		}, len(env.Sim.NodeNames())},
		{"Deployment with prePull", "{kind: Deployment, name: agent}", "\n            prePull: true", func(t *testing.T, ns string) {
			clitest.CreateDeployment(t, env, ns, "agent", 3)
		}, 3},
		{"Pods", `{kind: Pods, selector: "app=agent"}`, "", func(t *testing.T, ns string) {
			clitest.CreatePods(t, env, ns, "agent", 3)
		}, 3},
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
			create(t, dynamicClient(t), pipelineRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: roll
spec:
  pipelineSpec:
    tasks:
      - name: rollout
        taskSpec:
          apiVersion: inplace-rollout.io/v1alpha1
          kind: InPlaceRollout
          spec:
            target: %s
            batches: [1, "100%%"]
            gracePeriod: 1s
            soak: 1s
            timeout: 2m%s
        params:
          - name: images
            value: ["app=%s"]
`, tt.target, tt.extra, clitest.AppV2))
			cond := waitPipelineRun(t, ns, "roll", rolloutTimeout)
			run := waitCustomRun(t, ns, "roll", "rollout", reconcileTimeout, "done", isDone)
			if cond.Status != corev1.ConditionTrue {
				t.Fatalf("PipelineRun %s/roll: %s %s: %s; its CustomRun: %+v", ns, cond.Status, cond.Reason, cond.Message, succeeded(run))
			}
			if got := result(run, "updated-pods"); got != fmt.Sprint(tt.pods) {
				t.Errorf("CustomRun %s: result updated-pods = %q, want %d", run.Name, got, tt.pods)
			}
			if imgs := podImages(t, ns, "agent"); imgs[clitest.AppV2] != tt.pods {
				t.Errorf("pods by image: %v, want all %d on %s", imgs, tt.pods, clitest.AppV2)
			}
			uids := func(m map[string]podRecord) map[string]string {
				out := map[string]string{}
				for name, r := range m {
					out[name] = r.uid
				}
				return out
			}
			if b, a := uids(before), uids(recordPods(t, ns, "agent")); !maps.Equal(b, a) {
				t.Errorf("pods were recreated: UIDs before %v, after %v", b, a)
			}
			left, err := prepull.List(t.Context(), env.Client, ns, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("%d puller pods outlive the run, e.g. %s", len(left), left[0].Name)
			}
		})
	}
}
