package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// argoTimeout bounds an Argo scenario's wait: each kill can cost Argo's requeue interval
// (RequeueAfter, 11 s) before a new plugin process takes the rollout on.
const argoTimeout = 5 * time.Minute

// startArgo starts Argo Rollouts on the package's control plane the first time a test needs it:
// only the Argo tests pay for its boot.
var startArgo = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := env.StartArgo(ctx, cluster.ArgoOptions{PluginBinary: cli})
	return err
})

func argoClient(t *testing.T) argoclient.Interface {
	t.Helper()
	c, err := argoclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building an Argo Rollouts client: %v", err)
	}
	return c
}

// argoChaos drives the Argo scenarios and keeps their kill points.
type argoChaos struct {
	rng      *rand.Rand
	budget   int
	maxDelay time.Duration
	points   []killPoint
	// restarted says whether the controller was restarted, once per run.
	restarted bool
}

// TestKilledArgoPluginFinishesInPlace drives 30-pod StatefulSets through a Rollout whose step
// is our plugin, and SIGKILLs the plugin process at random points; Argo starts it again on its
// next call (within RequeueAfter), and the new process goes on from the cluster. Scenarios
// alternate: a rollout aborted once its first batch is in, killed through its rollback (which
// Argo's Abort call starts and a new process finishes), and a rollout to its end, during which
// the Argo controller is restarted once. After each scenario the invariants are checked.
func TestKilledArgoPluginFinishesInPlace(t *testing.T) {
	t.Parallel()
	kills, rng, maxDelay := settings(t, driverArgo)
	if err := startArgo(); err != nil {
		t.Fatalf("starting Argo Rollouts: %v", err)
	}
	a := &argoChaos{rng: rng, budget: kills, maxDelay: maxDelay}
	for i := 0; a.budget > 0 || i < 2; i++ {
		abort := i%2 == 0
		kind := "rollout"
		if abort {
			kind = "rollout aborted"
		}
		if !t.Run(fmt.Sprintf("%d %s", i, kind), func(t *testing.T) { a.scenario(t, i, abort) }) {
			t.Log("chaos: argo: scenario failed; replay with the seed logged above")
			break
		}
	}
	report(t, driverArgo, a.points)
	if !a.restarted {
		t.Error("the Argo controller was never restarted: the run scenario did not get that far")
	}
	if len(a.points) == 0 {
		t.Errorf("no plugin process was killed before its rollout finished: the test exercised nothing; raise %s", maxDelayEnv)
	}
}

// argoSteps is the Rollout's one canary step: our plugin rolling StatefulSet web to image in the
// batches the CLI scenarios use, with a soak that leaves the kills time between batches.
func argoSteps(t *testing.T, image string) []rolloutsv1alpha1.CanaryStep {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{
		"target":         map[string]any{"kind": "StatefulSet", "name": name},
		"images":         map[string]any{"app": image},
		"batches":        []any{1, "10%", "50%", "100%"},
		"maxUnavailable": 5,
		"soak":           "2s",
		"timeout":        "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	return []rolloutsv1alpha1.CanaryStep{{Plugin: &rolloutsv1alpha1.PluginStep{Name: "inplace-rollout/step", Config: cfg}}}
}

func (a *argoChaos) scenario(t *testing.T, i int, abort bool) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	createRollout(t, ns)
	old := setRolloutImage(t, ns, clitest.AppV2)
	if !abort {
		if !a.restarted {
			time.Sleep(randomDelay(a.rng, a.maxDelay))
			if err := env.Argo.Restart(); err != nil {
				t.Fatalf("restarting the Argo controller: %v", err)
			}
			a.restarted = true
			kp := observe(t, ns)
			t.Logf("argo controller restarted: lock %s, pods%s", kp.phase, counts(kp.stages))
		}
		a.kill(t, i, ns, "rollout", perCommand, a.maxDelay, lockIn(rollout.PhaseSucceeded))
		waitRollout(t, ns, "Healthy on the new revision", func(ro *rolloutsv1alpha1.Rollout) bool {
			return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
		})
		check(t, ns, orig, before, direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded})
		return
	}
	// One kill in the rollout, the others in the rollback, which starts once a random number
	// of pods, up to half of them (the third batch), are updated.
	a.kill(t, i, ns, "rollout", 1, a.maxDelay, lockIn(rollout.PhaseSucceeded))
	updated := 1 + a.rng.IntN(replicas/2)
	cluster.WaitFor(t, argoTimeout, fmt.Sprintf("%d pods of %s/%s updated", updated, ns, name), func(context.Context) (bool, error) {
		kp := observe(t, ns)
		return kp.stages[string(inplace.StageUpdated)] >= updated || over(kp), nil
	})
	if kp := observe(t, ns); kp.phase != rollout.PhaseProgressing {
		t.Fatalf("the rollout was over before the abort (lock %s, pods%s): the test proves nothing", kp.phase, counts(kp.stages))
	}
	t.Logf("aborting with %d pods updated", updated)
	patch := []byte(`{"status":{"abort":true}}`)
	if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("aborting Rollout %s/%s: %v", ns, name, err)
	}
	// Putting half the pods back takes a second or two: shorter delays land in it.
	a.kill(t, i, ns, "rollback", perCommand, max(a.maxDelay/4, 2*minDelay), lockIn(rollout.PhaseRolledBack))
	waitRollout(t, ns, "Degraded, aborted", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseDegraded && ro.Status.Abort
	})
	waitPlugin(t, ns, "the lock of "+ns+"/"+name+" RolledBack", func() bool { return lockIn(rollout.PhaseRolledBack)(t, ns) })
	check(t, ns, orig, before, direction{template: clitest.AppV1, restarts: 2, phase: rollout.PhaseRolledBack, back: true, partial: true})
}

// lockIn reports whether the StatefulSet's lock has reached phase.
func lockIn(phase rollout.Phase) func(t *testing.T, ns string) bool {
	return func(t *testing.T, ns string) bool {
		t.Helper()
		return observe(t, ns).phase == phase
	}
}

// kill SIGKILLs the plugin processes at most n times while kill points remain and the rollout
// is not done, each time a random delay, up to maxDelay, after Argo started a process again.
func (a *argoChaos) kill(t *testing.T, i int, ns, what string, n int, maxDelay time.Duration, done func(*testing.T, string) bool) {
	t.Helper()
	for ; n > 0 && a.budget > 0; n-- {
		waitPlugin(t, ns, "a plugin process, or the "+what+" done", func() bool {
			pids, err := env.Argo.PluginPIDs()
			if err != nil {
				t.Fatal(err)
			}
			return len(pids) > 0 || done(t, ns)
		})
		delay := randomDelay(a.rng, maxDelay)
		time.Sleep(delay)
		if done(t, ns) {
			return
		}
		pids, err := env.Argo.KillPlugins()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 0 {
			continue
		}
		a.budget--
		kp := observe(t, ns)
		kp.scenario, kp.command, kp.delay = i, "plugin ("+what+")", delay
		a.points = append(a.points, kp)
		t.Log(kp)
	}
}

// resyncAfter is how long waitPlugin lets no plugin process run before it touches the Rollout.
const resyncAfter = 20 * time.Second

// waitPlugin polls cond until it holds. Argo starts a plugin process when it next calls it, and
// it calls an aborted Rollout's step plugin only when it reconciles the Rollout: a process killed
// while it finished a rollback cut short leaves the rest to Argo's resync (15 minutes by
// default) or to any change of a Rollout. So while no plugin process runs for resyncAfter, the
// Rollout is touched (an annotation), standing in for that resync.
func waitPlugin(t *testing.T, ns, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(argoTimeout)
	idle := time.Now()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after %s", what, argoTimeout)
		}
		pids, err := env.Argo.PluginPIDs()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(pids) > 0:
			idle = time.Now()
		case time.Since(idle) > resyncAfter:
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.inplace-rollout.io/resync":%q}}}`, time.Now().Format(time.RFC3339Nano))
			if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatalf("touching Rollout %s/%s: %v", ns, name, err)
			}
			t.Logf("no plugin process for %s while waiting for %s: touched Rollout %s, as Argo's resync would", resyncAfter, what, name)
			idle = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createRollout creates Rollout web of 0 replicas (its steps run all the same, driving a
// workload it does not own) on AppV1 and waits until Argo counts its first revision Healthy.
func createRollout(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{"rollout": name}
	ro := &rolloutsv1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: rolloutsv1alpha1.RolloutSpec{
			Replicas:                ptr.To[int32](0),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			Template:                clitest.Template(labels),
			ProgressDeadlineSeconds: ptr.To[int32](600),
			Strategy:                rolloutsv1alpha1.RolloutStrategy{Canary: &rolloutsv1alpha1.CanaryStrategy{Steps: argoSteps(t, clitest.AppV1)}},
		},
	}
	if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Create(context.Background(), ro, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Rollout %s/%s: %v", ns, name, err)
	}
	waitRollout(t, ns, "its first revision Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
}

// setRolloutImage puts image in the Rollout's template and steps, a new revision for Argo, and
// returns the hash of the revision it leaves.
func setRolloutImage(t *testing.T, ns, image string) (oldHash string) {
	t.Helper()
	c := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := c.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		oldHash = ro.Status.CurrentPodHash
		ro.Spec.Template.Spec.Containers[0].Image = image
		ro.Spec.Strategy.Canary.Steps = argoSteps(t, image)
		_, err = c.Update(context.Background(), ro, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting Rollout %s/%s to %s: %v", ns, name, image, err)
	}
	return oldHash
}

// onNewRevision reports whether the Rollout has left the revision oldHash.
func onNewRevision(ro *rolloutsv1alpha1.Rollout, oldHash string) bool {
	return ro.Status.CurrentPodHash != "" && ro.Status.CurrentPodHash != oldHash
}

// waitRollout polls Rollout web until cond holds, failing the test with its last status.
func waitRollout(t *testing.T, ns, what string, cond func(*rolloutsv1alpha1.Rollout) bool) {
	t.Helper()
	c := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	cluster.WaitFor(t, argoTimeout, fmt.Sprintf("Rollout %s/%s: %s", ns, name, what), func(ctx context.Context) (bool, error) {
		ro, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cond(ro) {
			return true, nil
		}
		s := ro.Status
		return false, fmt.Errorf("phase %s, message %q, abort %v, stable %s, current %s", s.Phase, s.Message, s.Abort, s.StableRS, s.CurrentPodHash)
	})
}
