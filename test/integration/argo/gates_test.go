package argo_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestStepDrainsGatedPods: pods that declare the inplace-rollout.io/ready readiness gate are
// drained through it (the gate set False, so they leave their Service) before their images
// change, by the step plugin under the controller's ServiceAccount, and end Ready on the new
// image with the gate True again.
func TestStepDrainsGatedPods(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	env.StartGateController(t, ns)
	labels := map[string]string{"app": "web"}
	tmpl := clitest.Template(labels)
	tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(3)), ServiceName: "web", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating StatefulSet %s/web: %v", ns, err)
	}
	clitest.WaitStatefulSet(t, env, ns, "web", "every replica Ready through its gate", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == 3
	})
	_, before := podsOn(t, ns, "web", clitest.AppV1)

	// Every pod must be seen drained (gate False) while it still runs the old image.
	drained := watchDrains(t, ns, "web", clitest.AppV1)
	steps := oneStep("web", map[string]any{"gracePeriod": "2s"})
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	healthyOn(t, ns, "web", old)
	n, after := podsOn(t, ns, "web", clitest.AppV2)
	if n != 3 {
		t.Errorf("%d of 3 pods Running and Ready on %s", n, clitest.AppV2)
	}
	if !maps.Equal(before, after) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", before, after)
	}
	if got := drained(); len(got) != 3 {
		t.Errorf("pods seen drained through the gate on %s before their update: %v, want all 3", clitest.AppV1, got)
	}
}

// watchDrains polls the target's pods until the test ends, and returns a function that lists
// those seen with the readiness gate False while their app container's spec was still image.
func watchDrains(t *testing.T, ns, target, image string) func() []string {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + target})
			if err == nil {
				mu.Lock()
				for _, p := range pods.Items {
					if p.Spec.Containers[0].Image == image && gateFalse(&p) {
						seen[p.Name] = true
					}
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(seen))
	}
}

func gateFalse(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == inplace.ReadinessGate {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}
