package argo_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// midRollout creates Rollout web stepping StatefulSet web (6 pods, batches 1, 2, 3, 100%, a soak
// long enough to stop between batches), sets its image to v2 and returns once some of the pods
// and not all are updated, with the pods' state before.
func midRollout(t *testing.T, ns string) (before map[string]podState) {
	t.Helper()
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before = podStates(t, ns, "web")
	steps := oneStep("web", map[string]any{"batches": []any{1, 2, 3, "100%"}, "soak": "20s"})
	createRollout(t, ns, "web", clitest.AppV1, steps)
	setImage(t, ns, "web", clitest.AppV2, steps)
	cluster.WaitFor(t, 2*time.Minute, "the first batch of web on "+clitest.AppV2, func(context.Context) (bool, error) {
		n, _ := podsOn(t, ns, "web", clitest.AppV2)
		return n > 0, nil
	})
	if n, _ := podsOn(t, ns, "web", clitest.AppV2); n == replicas {
		t.Fatal("every pod was updated before the Rollout was deleted: the test proves nothing")
	}
	return before
}

func deleteRollout(t *testing.T, ns, name string) {
	t.Helper()
	c := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	if err := c.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Rollout %s/%s: %v", ns, name, err)
	}
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("Rollout %s/%s gone", ns, name), func(ctx context.Context) (bool, error) {
		_, err := c.Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}

// handedBack waits until StatefulSet web has its RollingUpdate back on the images every pod runs
// again (before), the lock RolledBack, and no pod recreated.
func handedBack(t *testing.T, ns string, before map[string]podState) {
	t.Helper()
	waitRolledBack(t, ns, "web", before, 3*time.Minute)
	clitest.WaitStatefulSet(t, env, ns, "web", "its RollingUpdate back on "+clitest.AppV1+" with every replica current",
		func(s *appsv1.StatefulSet) bool {
			return s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
				s.Spec.Template.Spec.Containers[0].Image == clitest.AppV1 &&
				s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == replicas
		})
	if l := lockOf(t, ns, "web"); l == nil || l.Phase != rollout.PhaseRolledBack {
		t.Errorf("lock of web %+v, want RolledBack", l)
	}
	// The controller had every chance to recreate a pod by now.
	if after := podStates(t, ns, "web"); !maps.Equal(before, after) {
		t.Errorf("pods changed after the rollback: before %v, after %v", before, after)
	}
}

// TestStepRolloutDeletedRollsBack: a Rollout deleted mid-rollout has its rollout rolled back by
// the plugin at once (its deletion is watched): every pod it touched goes back to the image it
// ran, the same pod, and the StatefulSet is handed back; nothing goes on updating pods for a
// Rollout that no longer exists.
func TestStepRolloutDeletedRollsBack(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	before := midRollout(t, ns)
	deleteRollout(t, ns, "web")
	handedBack(t, ns, before)
}

// TestStepRolloutDeletedWithoutPluginThenCreatedAgain: the plugin process is killed, the Rollout
// deleted mid-rollout while no plugin process may run, and a Rollout of the same name created
// again on the old images, then set to the new ones. The rollout of the deleted Rollout is not
// the new one's to promote, hand back or fail on: the plugin, started again for the new
// Rollout's calls, rolls it back (its lock names the deleted Rollout's UID), and the new Rollout
// then rolls the StatefulSet out as any other. No pod is recreated at any point.
func TestStepRolloutDeletedWithoutPluginThenCreatedAgain(t *testing.T) {
	ns := env.Namespace(t)
	midRollout(t, ns)
	_, uids := podsOn(t, ns, "web", clitest.AppV1)
	var touched []string
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		if p.Spec.Containers[0].Image == clitest.AppV2 {
			touched = append(touched, p.Name)
		}
		uids[p.Name] = string(p.UID)
	}
	pids, err := env.Argo.KillPlugins()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) == 0 {
		t.Fatal("no plugin process to kill")
	}
	deleteRollout(t, ns, "web")
	steps := oneStep("web", map[string]any{"batches": []any{1, 2, 3, "100%"}})
	ro := createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	healthyOn(t, ns, "web", old)
	if n, after := podsOn(t, ns, "web", clitest.AppV2); n != replicas || !maps.Equal(uids, after) {
		t.Errorf("%d of %d pods on %s, UIDs before %v after %v; want all, none recreated", n, replicas, clitest.AppV2, uids, after)
	}
	if l := lockOf(t, ns, "web"); l == nil || l.Phase != rollout.PhaseSucceeded || l.HolderUID != ro.UID {
		t.Errorf("lock of web %+v, want Succeeded for the new Rollout (UID %s)", l, ro.UID)
	}
	// The pods the deleted Rollout updated were put back before the new rollout began.
	for _, pod := range touched {
		evs, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + pod + ",reason=" + inplace.EventRolledBack})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 0 {
			t.Errorf("pod %s, updated by the deleted Rollout, has no %s Event", pod, inplace.EventRolledBack)
		}
	}
}
