package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/inplace-rollout/inplace-rollout/controller/inplacerollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// controllerTimeout bounds a controller scenario's wait: each kill costs the Lease the killed
// process held (15 s) before the new one leads.
const controllerTimeout = 5 * time.Minute

// startController installs config/controller and starts the InPlaceRollout controller the
// first time a test needs it.
var startController = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.InstallInplaceController(ctx); err != nil {
		return fmt.Errorf("installing config/controller: %w", err)
	}
	if _, err := env.StartInplaceController(ctx, cli); err != nil {
		return fmt.Errorf("starting inplace-rollout controller: %w", err)
	}
	return nil
})

// controllerChaos drives the controller scenarios.
type controllerChaos struct{ ownChaos }

// TestKilledControllerFinishesInPlace rolls 30-pod StatefulSets with an InPlaceRollout object and
// SIGKILLs inplace-rollout controller at random points, starting it again each time; the new
// process takes the Lease over and goes on from the cluster. Scenarios alternate: an object
// rolled out to its end, which must succeed, and an object deleted once its first batch is in,
// which must roll back before it goes. After each scenario the invariants are checked.
func TestKilledControllerFinishesInPlace(t *testing.T) {
	t.Parallel()
	kills, rng, maxDelay := settings(t, driverController)
	if err := startController(); err != nil {
		t.Fatal(err)
	}
	c := &controllerChaos{ownChaos{proc: env.InplaceController, driver: driverController, process: "controller", timeout: controllerTimeout,
		rng: rng, budget: kills, maxDelay: maxDelay}}
	c.run(t, "rollout", "rollout deleted", c.scenario)
}

func objects(t *testing.T, ns string) dynamic.ResourceInterface {
	t.Helper()
	c, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building a dynamic client: %v", err)
	}
	return c.Resource(inplacerollout.Resource).Namespace(ns)
}

func (c *controllerChaos) scenario(t *testing.T, i int, deleted bool) {
	ns := env.Namespace(t)
	orig := clitest.CreateStatefulSet(t, env, ns, name, replicas)
	before := snapshot(t, ns)
	createObject(t, ns)
	rolloutOver := func() bool { return over(observe(t, ns)) }
	if !deleted {
		c.kill(t, i, ns, "rollout", perCommand, c.maxDelay, rolloutOver)
		obj := waitObject(t, ns, "Succeeded", func(o *v1alpha1.InPlaceRollout) bool { return o.Status.Phase == "Succeeded" })
		if obj.Status.Updated != replicas {
			t.Errorf("InPlaceRollout %s/%s: status %+v, want %d pods updated", ns, name, obj.Status, replicas)
		}
		check(t, ns, orig, before, direction{template: clitest.AppV2, restarts: 1, phase: rollout.PhaseSucceeded})
		return
	}
	c.kill(t, i, ns, "rollout", 1, c.maxDelay, rolloutOver)
	updated := 1 + c.rng.IntN(replicas/2)
	cluster.WaitFor(t, controllerTimeout, fmt.Sprintf("%d pods of %s/%s updated", updated, ns, name), func(context.Context) (bool, error) {
		kp := observe(t, ns)
		return kp.stages[string(inplace.StageUpdated)] >= updated || over(kp), nil
	})
	if kp := observe(t, ns); kp.phase != rollout.PhaseProgressing {
		t.Fatalf("the rollout was over before the delete (lock %s, pods%s): the test proves nothing", kp.phase, counts(kp.stages))
	}
	t.Logf("deleting with %d pods updated", updated)
	if err := objects(t, ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting InPlaceRollout %s/%s: %v", ns, name, err)
	}
	// Putting a few pods back takes a second or two: shorter delays land in it. The rollback is
	// over once the object is gone (its finalizer held it until then).
	gone := func() bool {
		_, err := objects(t, ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	c.kill(t, i, ns, "rollback", perCommand, max(c.maxDelay/4, 2*minDelay), gone)
	cluster.WaitFor(t, controllerTimeout, "InPlaceRollout "+ns+"/"+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := objects(t, ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	check(t, ns, orig, before, direction{template: clitest.AppV1, restarts: 2, phase: rollout.PhaseRolledBack, back: true, partial: true})
}

// createObject creates InPlaceRollout web rolling StatefulSet web to AppV2 in the batches the
// CLI scenarios use, with a soak that leaves the kills time between batches.
func createObject(t *testing.T, ns string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.Kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"target":         map[string]any{"kind": "StatefulSet", "name": name},
			"images":         map[string]any{"app": clitest.AppV2},
			"batches":        []any{int64(1), "10%", "50%", "100%"},
			"maxUnavailable": int64(5),
			"soak":           "2s",
			"timeout":        "2m",
		},
	}}
	if _, err := objects(t, ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating InPlaceRollout %s/%s: %v", ns, name, err)
	}
}

// waitObject polls InPlaceRollout web until cond holds of it.
func waitObject(t *testing.T, ns, what string, cond func(*v1alpha1.InPlaceRollout) bool) *v1alpha1.InPlaceRollout {
	t.Helper()
	var obj v1alpha1.InPlaceRollout
	cluster.WaitFor(t, controllerTimeout, "InPlaceRollout "+ns+"/"+name+" "+what, func(ctx context.Context) (bool, error) {
		u, err := objects(t, ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
			return false, err
		}
		if !cond(&obj) {
			return false, fmt.Errorf("status %+v", obj.Status)
		}
		return true, nil
	})
	return &obj
}
