package rollout_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const (
	appV1 = clitest.AppV1
	appV2 = clitest.AppV2
	appV3 = clitest.AppV3
)

type result = clitest.Result

// runCLI runs inplace-rollout against the test cluster.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	r := clitest.Run(t, env, cli, args...)
	return r
}

func template(labels map[string]string) corev1.PodTemplateSpec { return clitest.Template(labels) }

func createStatefulSet(t *testing.T, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	return clitest.CreateStatefulSet(t, env, ns, name, replicas)
}

// createDeployment creates a Deployment of template pods labelled app=NAME and waits until
// every replica is available.
func createDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeployment(t, ns, name, replicas)
}

func waitStatefulSet(t *testing.T, ns, name, what string, cond func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
	t.Helper()
	return clitest.WaitStatefulSet(t, env, ns, name, what, cond)
}

func listPods(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	return clitest.ListPods(t, env, ns, selector)
}

// identity is what must not change about a pod updated in place.
type identity struct {
	uid, ip, node string
	restarts      map[string]int32
	imageIDs      map[string]string
}

func identities(t *testing.T, ns, selector string) map[string]identity {
	t.Helper()
	out := map[string]identity{}
	for _, p := range listPods(t, ns, selector) {
		id := identity{uid: string(p.UID), ip: p.Status.PodIP, node: p.Spec.NodeName, restarts: map[string]int32{}, imageIDs: map[string]string{}}
		for _, cs := range p.Status.ContainerStatuses {
			id.restarts[cs.Name] = cs.RestartCount
			id.imageIDs[cs.Name] = cs.ImageID
		}
		out[p.Name] = id
	}
	return out
}

// checkInPlace checks that every pod kept its UID, IP and node, and that the app container
// restarted appRestarts times and the sidecar never.
func checkInPlace(t *testing.T, before, after map[string]identity, appRestarts int32) {
	t.Helper()
	if len(after) != len(before) {
		t.Fatalf("%d pods after, %d before", len(after), len(before))
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Errorf("pod %s is gone", name)
			continue
		}
		if a.uid != b.uid || a.ip != b.ip || a.node != b.node {
			t.Errorf("pod %s was recreated or moved: UID %s->%s IP %s->%s node %s->%s", name, b.uid, a.uid, b.ip, a.ip, b.node, a.node)
		}
		if got := a.restarts["app"] - b.restarts["app"]; got != appRestarts {
			t.Errorf("pod %s: app restarted %d times, want %d", name, got, appRestarts)
		}
		if a.restarts["sidecar"] != b.restarts["sidecar"] {
			t.Errorf("pod %s: sidecar restarted", name)
		}
	}
}

func podsOnImage(t *testing.T, ns, selector, image string) {
	t.Helper()
	for _, p := range listPods(t, ns, selector) {
		cs := cluster.ContainerStatus(&p, "app")
		if p.Spec.Containers[0].Image != image || cs == nil || cs.State.Running == nil || !cluster.PodReady(&p) {
			t.Errorf("pod %s: spec %s, status %+v, ready %v; want Running and Ready on %s", p.Name, p.Spec.Containers[0].Image, cs, cluster.PodReady(&p), image)
		}
	}
}

func stateOf(t *testing.T, p *corev1.Pod) *inplace.State {
	t.Helper()
	st, err := inplace.ReadState(p)
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return st
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func jsonString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
