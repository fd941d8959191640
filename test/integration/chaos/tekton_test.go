package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// tektonTimeout bounds a Tekton scenario's wait: each kill costs the Lease the killed process
// held (15 s) before the new one leads.
const tektonTimeout = 5 * time.Minute

// startTekton starts Tekton Pipelines (for its CRDs) and our CustomRun controller the first time
// a test needs them: only the Tekton test pays for their boot.
var startTekton = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.StartTekton(ctx); err != nil {
		return fmt.Errorf("starting Tekton: %w", err)
	}
	if _, err := env.StartInplaceTekton(ctx, cli); err != nil {
		return fmt.Errorf("starting the inplace-rollout tekton-controller: %w", err)
	}
	return nil
})

// tektonChaos drives the Tekton scenarios.
type tektonChaos struct{ ownChaos }

// TestKilledTektonControllerFinishesInPlace rolls 30-pod StatefulSets with a CustomRun of our
// kind and SIGKILLs our tekton-controller at random points, starting it again each time; the new
// process takes the Lease over and goes on from the cluster. Scenarios alternate: a run to its
// end, which must succeed, and a run cancelled once its first batch is in, which must roll back
// and fail as cancelled. After each scenario the invariants are checked.
func TestKilledTektonControllerFinishesInPlace(t *testing.T) {
	t.Parallel()
	kills, rng, maxDelay := settings(t, driverTekton)
	if err := startTekton(); err != nil {
		t.Fatal(err)
	}
	c := &tektonChaos{ownChaos{proc: env.InplaceTekton, driver: driverTekton, process: "tekton-controller", timeout: tektonTimeout,
		rng: rng, budget: kills, maxDelay: maxDelay}}
	c.run(t, "run", "run cancelled", c.scenario)
}

func tektonClient(t *testing.T) tektonclient.Interface {
	t.Helper()
	c, err := tektonclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building a Tekton client: %v", err)
	}
	return c
}

func (c *tektonChaos) scenario(t *testing.T, i int, cancel bool) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	createCustomRun(t, ns)
	if !cancel {
		c.kill(t, i, ns, "run", perCommand, c.maxDelay, c.runDone(t, ns))
		run := waitCustomRunDone(t, ns)
		if cond := run.Status.GetCondition(apis.ConditionSucceeded); cond == nil || cond.Status != corev1.ConditionTrue {
			t.Errorf("CustomRun %s/%s: Succeeded %+v, want True", ns, name, cond)
		}
		check(t, ns, orig, before, direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded})
		return
	}
	c.kill(t, i, ns, "run", 1, c.maxDelay, c.runDone(t, ns))
	updated := 1 + c.rng.IntN(replicas/2)
	cluster.WaitFor(t, tektonTimeout, fmt.Sprintf("%d pods of %s/%s updated", updated, ns, name), func(context.Context) (bool, error) {
		kp := observe(t, ns)
		return kp.stages[string(inplace.StageUpdated)] >= updated || over(kp), nil
	})
	if kp := observe(t, ns); kp.phase != rollout.PhaseProgressing {
		t.Fatalf("the rollout was over before the cancel (lock %s, pods%s): the test proves nothing", kp.phase, counts(kp.stages))
	}
	t.Logf("cancelling with %d pods updated", updated)
	patch := []byte(`{"spec":{"status":"RunCancelled"}}`)
	if _, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("cancelling CustomRun %s/%s: %v", ns, name, err)
	}
	// Putting a few pods back takes a second or two: shorter delays land in it.
	c.kill(t, i, ns, "rollback", perCommand, max(c.maxDelay/4, 2*minDelay), c.runDone(t, ns))
	run := waitCustomRunDone(t, ns)
	if cond := run.Status.GetCondition(apis.ConditionSucceeded); cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != "CustomRunCancelled" {
		t.Errorf("CustomRun %s/%s: Succeeded %+v, want False CustomRunCancelled", ns, name, cond)
	}
	check(t, ns, orig, before, direction{template: clitest.AppV1, restarts: 2, phase: rollout.PhaseRolledBack, back: true, partial: true})
}

// runDone reports whether the scenario's CustomRun in ns is done.
func (c *tektonChaos) runDone(t *testing.T, ns string) func() bool {
	return func() bool { return customRun(t, ns).IsDone() }
}

// createCustomRun creates CustomRun web of our kind, rolling StatefulSet web to AppV2 in the
// batches the CLI scenarios use, with a soak that leaves the kills time between batches.
func createCustomRun(t *testing.T, ns string) {
	t.Helper()
	spec, err := json.Marshal(map[string]any{
		"target":         map[string]any{"kind": "StatefulSet", "name": name},
		"images":         map[string]any{"app": clitest.AppV2},
		"batches":        []any{1, "10%", "50%", "100%"},
		"maxUnavailable": 5,
		"soak":           "2s",
		"timeout":        "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1beta1.CustomRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1beta1.CustomRunSpec{CustomSpec: &v1beta1.EmbeddedCustomRunSpec{
			TypeMeta: runtime.TypeMeta{APIVersion: "inplace-rollout.io/v1alpha1", Kind: "InPlaceRollout"},
			Spec:     runtime.RawExtension{Raw: spec},
		}},
	}
	if _, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Create(context.Background(), run, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CustomRun %s/%s: %v", ns, name, err)
	}
}

func customRun(t *testing.T, ns string) *v1beta1.CustomRun {
	t.Helper()
	run, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading CustomRun %s/%s: %v", ns, name, err)
	}
	return run
}

// waitCustomRunDone polls CustomRun web until it is done.
func waitCustomRunDone(t *testing.T, ns string) *v1beta1.CustomRun {
	t.Helper()
	var run *v1beta1.CustomRun
	cluster.WaitFor(t, tektonTimeout, "CustomRun "+ns+"/"+name+" done", func(ctx context.Context) (bool, error) {
		r, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		run = r
		if !r.IsDone() {
			return false, fmt.Errorf("condition %+v", r.Status.GetCondition(apis.ConditionSucceeded))
		}
		return true, nil
	})
	return run
}
