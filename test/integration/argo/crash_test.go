package argo_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// appRestarts returns each pod's app container restart count.
func appRestarts(t *testing.T, ns, target string) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+target) {
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			out[p.Name] = cs.RestartCount
		}
	}
	return out
}

// TestRolloutSurvives kills the plugin process, or restarts the controller, once the rollout
// has updated some pods and not all: the rollout completes all the same, from what is on the
// cluster, and no container is restarted twice. The pods are written to all along, as a kubelet
// would.
func TestRolloutSurvives(t *testing.T) {
	tests := []struct {
		name  string
		crash func(t *testing.T)
	}{
		{"the plugin process killed", func(t *testing.T) {
			pids, err := env.Argo.KillPlugins()
			if err != nil {
				t.Fatal(err)
			}
			if len(pids) == 0 {
				t.Fatal("no plugin process to kill")
			}
		}},
		{"the controller restarted", func(t *testing.T) {
			if err := env.Argo.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			clitest.CreateStatefulSet(t, env, ns, "web", replicas)
			_, uids := podsOn(t, ns, "web", clitest.AppV1)
			restarts := appRestarts(t, ns, "web")
			churnPods(t, ns, "web")
			// A soak long enough that the crash lands between the first and the last batch.
			steps := oneStep("web", map[string]any{"soak": "5s"})
			createRollout(t, ns, "web", clitest.AppV1, steps)
			old := setImage(t, ns, "web", clitest.AppV2, steps)
			cluster.WaitFor(t, time.Minute, "the first batch on "+clitest.AppV2, func(context.Context) (bool, error) {
				n, _ := podsOn(t, ns, "web", clitest.AppV2)
				return n > 0, nil
			})
			if n, _ := podsOn(t, ns, "web", clitest.AppV2); n == replicas {
				t.Fatalf("every pod was updated before the crash: the test proves nothing")
			}
			tt.crash(t)
			healthyOn(t, ns, "web", old)
			n, after := podsOn(t, ns, "web", clitest.AppV2)
			if n != replicas {
				t.Errorf("%d of %d pods on %s", n, replicas, clitest.AppV2)
			}
			if !maps.Equal(uids, after) {
				t.Errorf("pods were recreated: UIDs before %v, after %v", uids, after)
			}
			for pod, r := range appRestarts(t, ns, "web") {
				if r != restarts[pod]+1 {
					t.Errorf("pod %s: app restarted %d times, want once", pod, r-restarts[pod])
				}
			}
		})
	}
}
