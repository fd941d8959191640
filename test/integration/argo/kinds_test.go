package argo_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// fromRolloutStep is a Rollout with a single plugin step that rolls target (a step config's
// target field) to the Rollout's own template images, with short grace and soak. extra fields
// are added as given.
func fromRolloutStep(target map[string]any, extra map[string]any) stepsFunc {
	return func(string) []map[string]any {
		cfg := map[string]any{
			"target":      target,
			"fromRollout": true,
			"batches":     []any{1, "50%", "100%"},
			"gracePeriod": "1s",
			"soak":        "1s",
			"timeout":     "2m",
		}
		maps.Copy(cfg, extra)
		return []map[string]any{cfg}
	}
}

// createDeployment creates a Deployment of Template pods labelled app=NAME and waits until its
// controller has rolled it out: every replica updated and available, from one ReplicaSet.
func createDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: clitest.Template(labels),
		},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s/%s: %v", ns, name, err)
	}
	waitDeployment(t, ns, name, replicas, clitest.AppV1)
}

// waitDeployment waits until the Deployment is as its controller leaves a finished rollout of
// image: unpaused, observed, its template on image, every replica updated and available, from
// one ReplicaSet, whose name it returns.
func waitDeployment(t *testing.T, ns, name string, replicas int32, image string) (replicaSet string) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("Deployment %s/%s unpaused and rolled out on %s", ns, name, image), func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		if d.Spec.Paused || d.Spec.Template.Spec.Containers[0].Image != image || s.ObservedGeneration != d.Generation ||
			s.Replicas != replicas || s.UpdatedReplicas != replicas || s.AvailableReplicas != replicas {
			return false, fmt.Errorf("paused=%v image=%s generation %d observed %d, replicas %d updated %d available %d",
				d.Spec.Paused, d.Spec.Template.Spec.Containers[0].Image, d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
		}
		rsList, err := env.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		var active []string
		for _, rs := range rsList.Items {
			if rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
				active = append(active, rs.Name)
			}
		}
		if len(active) != 1 {
			return false, fmt.Errorf("ReplicaSets with replicas: %v, want one", active)
		}
		replicaSet = active[0]
		return true, nil
	})
	return replicaSet
}

// runFailed reports whether a Run of the Rollout's step ended Failed.
func runFailed(ro *rolloutsv1alpha1.Rollout) bool {
	for _, sp := range ro.Status.Canary.StepPluginStatuses {
		if sp.Operation == rolloutsv1alpha1.StepPluginOperationRun && sp.Phase == rolloutsv1alpha1.StepPluginPhaseFailed {
			return true
		}
	}
	return false
}

// TestStepRollsADeploymentInPlace: a Rollout's step rolls a 4-replica Deployment in place to the
// Rollout's image, and hands it back unpaused on that image with the same ReplicaSet and pods;
// then a crash image fails the step and every pod is back on the image it ran.
func TestStepRollsADeploymentInPlace(t *testing.T) {
	t.Parallel()
	began := time.Now()
	const n = 4
	ns := env.Namespace(t)
	createDeployment(t, ns, "web", n)
	rsBefore := waitDeployment(t, ns, "web", n, clitest.AppV1)
	_, uids := podsOn(t, ns, "web", clitest.AppV1)
	steps := fromRolloutStep(map[string]any{"kind": "Deployment", "name": "web"}, nil)

	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	healthyOn(t, ns, "web", old)
	on, after := podsOn(t, ns, "web", clitest.AppV2)
	if on != n {
		t.Errorf("%d of %d pods Running and Ready on %s", on, n, clitest.AppV2)
	}
	if !maps.Equal(uids, after) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", uids, after)
	}
	// The Deployment controller adopted the ReplicaSet the rollout updated: no new one.
	if rs := waitDeployment(t, ns, "web", n, clitest.AppV2); rs != rsBefore {
		t.Errorf("the Deployment runs ReplicaSet %s after the rollout, want %s, as before it", rs, rsBefore)
	}
	if l := kindLock(t, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "web"}); l == nil || l.Phase != rollout.PhaseSucceeded {
		t.Errorf("the lock of the Deployment is %+v, want Succeeded", l)
	}
	t.Logf("rolled in place through Argo in %s", time.Since(began).Round(100*time.Millisecond))

	before := podStates(t, ns, "web")
	const crash = "registry.example/app:crash"
	old = setImage(t, ns, "web", crash, steps)
	if ro := abortedOn(t, ns, "web", old); !runFailed(ro) {
		t.Errorf("no Run of the step ended Failed: %s", describeRollout(ro))
	}
	waitRolledBack(t, ns, "web", before, time.Minute)
	if c := specImages(t, ns, "web", crash); c != 0 {
		t.Errorf("%d pods' specs still on %s", c, crash)
	}
	if rs := waitDeployment(t, ns, "web", n, clitest.AppV2); rs != rsBefore {
		t.Errorf("the Deployment runs ReplicaSet %s after the rollback, want %s", rs, rsBefore)
	}
	if l := kindLock(t, workload.Ref{Kind: workload.Deployment, Namespace: ns, Name: "web"}); l == nil || l.Phase != rollout.PhaseRolledBack {
		t.Errorf("the lock of the Deployment is %+v, want RolledBack", l)
	}
	t.Logf("rollout and crash rollback of a Deployment in %s", time.Since(began).Round(100*time.Millisecond))
}

// TestStepRollsLabelSelectedPodsInPlace: a Rollout's step rolls bare pods chosen by a label
// selector in place; then a slow image under a second selector of the same pods is aborted while
// every pod is on its way to it, and every pod is back on the image it ran. The second rollout's
// rollback takes the pods from the first's lock, which records nothing any longer: it is
// collected, so the role's delete of ConfigMaps is exercised.
func TestStepRollsLabelSelectedPodsInPlace(t *testing.T) {
	t.Parallel()
	began := time.Now()
	const n = 4
	ns := env.Namespace(t)
	labels := map[string]string{"app": "loose", "tier": "web"}
	tmpl := clitest.Template(labels)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("loose-%d", i), Namespace: ns, Labels: labels}, Spec: tmpl.Spec}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
		}
	}
	for i := range n {
		env.WaitForPod(t, ns, fmt.Sprintf("loose-%d", i), 30*time.Second, "Ready", cluster.PodReady)
	}
	_, uids := podsOn(t, ns, "loose", clitest.AppV1)
	first := workload.Ref{Kind: workload.Pods, Namespace: ns, Selector: "app=loose"}
	second := workload.Ref{Kind: workload.Pods, Namespace: ns, Selector: "app=loose,tier=web"}

	steps := fromRolloutStep(map[string]any{"kind": "Pods", "selector": first.Selector}, nil)
	createRollout(t, ns, "loose", clitest.AppV1, steps)
	old := setImage(t, ns, "loose", clitest.AppV2, steps)
	healthyOn(t, ns, "loose", old)
	on, after := podsOn(t, ns, "loose", clitest.AppV2)
	if on != n {
		t.Errorf("%d of %d pods Running and Ready on %s", on, n, clitest.AppV2)
	}
	if !maps.Equal(uids, after) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", uids, after)
	}
	if l := kindLock(t, first); l == nil || l.Phase != rollout.PhaseSucceeded {
		t.Fatalf("the lock of %s is %+v, want Succeeded", first, l)
	}
	t.Logf("rolled in place through Argo in %s", time.Since(began).Round(100*time.Millisecond))

	// A slow image takes 10 s to become ready; one batch of every pod at once keeps them all in
	// flight when the abort comes, so that each pod's state ends with the second rollout's.
	before := podStates(t, ns, "loose")
	const slow = "registry.example/app:slow-v3"
	steps = fromRolloutStep(map[string]any{"kind": "Pods", "selector": second.Selector},
		map[string]any{"batches": []any{"100%"}, "maxUnavailable": "100%"})
	old = setImage(t, ns, "loose", slow, steps)
	cluster.WaitFor(t, time.Minute, "every pod of loose updated to "+slow, func(context.Context) (bool, error) {
		return specImages(t, ns, "loose", slow) == n, nil
	})
	if on, _ := podsOn(t, ns, "loose", slow); on == n {
		t.Fatalf("every pod was Ready on %s before the abort: the test proves nothing", slow)
	}
	argoRollouts(t, "abort", "loose", "-n", ns)
	abortedOn(t, ns, "loose", old)
	waitRolledBack(t, ns, "loose", before, time.Minute)
	if c := specImages(t, ns, "loose", slow); c != 0 {
		t.Errorf("%d pods' specs still on %s", c, slow)
	}
	cluster.WaitFor(t, time.Minute, "the lock of "+second.String()+" RolledBack", func(context.Context) (bool, error) {
		l := kindLock(t, second)
		return l != nil && l.Phase == rollout.PhaseRolledBack, nil
	})
	if l := kindLock(t, first); l != nil {
		t.Errorf("the lock of %s is still there (%s), though no pod carries its rollout", first, l.Phase)
	}
	t.Logf("rollout and aborted rollout of label-selected pods in %s", time.Since(began).Round(100*time.Millisecond))
}

// kindLock reads the lock of ref: nil when a selector's lock ConfigMap is absent.
func kindLock(t *testing.T, ref workload.Ref) *rollout.Record {
	t.Helper()
	l, err := rollout.ReadRecord(context.Background(), env.Client, ref)
	if err != nil {
		t.Fatalf("reading the lock of %s: %v", ref, err)
	}
	return l
}
