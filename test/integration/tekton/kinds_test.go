package tekton_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestCustomRunRollsEachKind: CustomRuns roll a DaemonSet, a Deployment (with prePull) and
// label-selected Pods behind the readiness gate in place, every pod on the new image with its
// UID, while someone else writes the pods; no puller pod outlives the run. A second selector
// taking the Pods of the first removes the first one's lock. Besides showing each kind works
// through the controller, it makes the controller use the rules of config/tekton that only
// these cases need, for the RBAC check.
func TestCustomRunRollsEachKind(t *testing.T) {
	type run struct{ target, image string }
	tests := []struct {
		name   string
		extra  string // more spec fields, YAML lines indented for the spec
		create func(t *testing.T, ns string)
		pods   int
		runs   []run // in order, each the task of its own PipelineRun
	}{
		{"DaemonSet", "", func(t *testing.T, ns string) {
			clitest.CreateDaemonSet(t, env, ns, "agent")
		}, len(env.Sim.NodeNames()), []run{{"{kind: DaemonSet, name: agent}", clitest.AppV2}}},
		{"Deployment with prePull", "\n            prePull: true", func(t *testing.T, ns string) {
			clitest.CreateDeployment(t, env, ns, "agent", 3)
		}, 3, []run{{"{kind: Deployment, name: agent}", clitest.AppV2}}},
		{"gated Pods, then a second selector", "", func(t *testing.T, ns string) {
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
				create(t, dynamicClient(t), pipelineRunsGVR, ns, fmt.Sprintf(`
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: %s
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
`, name, r.target, tt.extra, r.image))
				cond := waitPipelineRun(t, ns, name, rolloutTimeout)
				cr := waitCustomRun(t, ns, name, "rollout", reconcileTimeout, "done", isDone)
				if cond.Status != corev1.ConditionTrue {
					t.Fatalf("PipelineRun %s/%s: %s %s: %s; its CustomRun: %+v", ns, name, cond.Status, cond.Reason, cond.Message, succeeded(cr))
				}
				if got := result(cr, "updated-pods"); got != fmt.Sprint(tt.pods) {
					t.Errorf("CustomRun %s: result updated-pods = %q, want %d", cr.Name, got, tt.pods)
				}
				if imgs := podImages(t, ns, "agent"); imgs[r.image] != tt.pods {
					t.Errorf("after PipelineRun %s, pods by image: %v, want all %d on %s", name, imgs, tt.pods, r.image)
				}
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
