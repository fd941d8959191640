package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// Resources rolled out in place through the pods' resize subresource, by the CLI, on a
// StatefulSet whose app container declares CPU and memory with resizePolicy NotRequired for
// both (the kubelet's default, written out): on a simulated node and on the real node, the same
// cases.
func TestResourcesInPlace(t *testing.T) {
	onBoth(t, resourcesInPlace)
}

func resourcesInPlace(t *testing.T, ns, node string) {
	labels := map[string]string{"app": "web"}
	tmpl := template(labels)
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	app := &tmpl.Spec.Containers[0]
	app.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	app.ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(2)), ServiceName: "web", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
		},
	}
	_, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	must(t, err, "creating StatefulSet %s/web", ns)
	clitest.WaitStatefulSet(t, env, ns, "web", "every replica Ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == 2 && s.Status.UpdatedReplicas == 2
	})

	// CPU alone: no container restarts, no pod is recreated.
	before := identities(t, ns, "app=web")
	if r := runSpec(t, ns, `{app: {requests: {cpu: 150m}, limits: {cpu: 300m}}}`); r.Code != 0 {
		t.Fatalf("run cpu 150m/300m: %s", r)
	}
	after := identities(t, ns, "app=web")
	checkInPlaceOn(t, node, before, after, 0)
	for name, b := range before {
		if after[name].ContainerID != b.ContainerID {
			t.Errorf("pod %s: app container %s replaced by %s for a CPU resize with NotRequired", name, b.ContainerID, after[name].ContainerID)
		}
	}
	runsResources(t, ns, "app=web", "150m", "300m", "64Mi", "128Mi")
	templateResources(t, ns, "150m", "300m", "64Mi", "128Mi")

	// A new image and memory together: each container restarts once, and ends with both.
	before = after
	if r := runSpec(t, ns, `{app: {requests: {memory: 80Mi}, limits: {memory: 160Mi}}}`, "--image", "app="+image("v2")); r.Code != 0 {
		t.Fatalf("run v2 with memory 80Mi/160Mi: %s", r)
	}
	after = identities(t, ns, "app=web")
	checkInPlaceOn(t, node, before, after, 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
	runsResources(t, ns, "app=web", "150m", "300m", "80Mi", "160Mi")
	templateResources(t, ns, "150m", "300m", "80Mi", "160Mi")

	// More CPU than the node has: the kubelet calls the resize Infeasible, and the batch goes
	// back to the resources it ran with, without a restart.
	before = after
	if r := runSpec(t, ns, `{app: {requests: {cpu: "500"}, limits: {cpu: "500"}}}`, "--batches", "1,100%"); r.Code != 1 {
		t.Fatalf("run cpu 500: exit %d, want 1 (failed and rolled back): %s", r.Code, r)
	}
	after = identities(t, ns, "app=web")
	checkInPlaceOn(t, node, before, after, 0)
	runsResources(t, ns, "app=web", "150m", "300m", "80Mi", "160Mi")
	templateResources(t, ns, "150m", "300m", "80Mi", "160Mi")
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending && c.Status == corev1.ConditionTrue {
				t.Errorf("pod %s still has a pending resize after the rollback: %s %s", p.Name, c.Reason, c.Message)
			}
		}
	}
}

// runSpec runs the CLI on StatefulSet web of ns with resources (a YAML map of containers) from
// a file, and args after.
func runSpec(t *testing.T, ns, resources string, args ...string) clitest.Result {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rollout.yaml")
	doc := fmt.Sprintf("apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec:\n  target: {kind: StatefulSet, name: web}\n  resources: %s\n  timeout: 2m\n", resources)
	must(t, os.WriteFile(file, []byte(doc), 0o600), "writing %s", file)
	return run(t, append([]string{"run", "-n", ns, "-f", file}, args...)...)
}

// runsResources fails unless every pod's app container asks for these resources in its spec
// and the kubelet reports it runs with them.
func runsResources(t *testing.T, ns, selector, cpuReq, cpuLim, memReq, memLim string) {
	t.Helper()
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		spec := p.Spec.Containers[0].Resources
		if !sameResources(spec, cpuReq, cpuLim, memReq, memLim) {
			t.Errorf("pod %s: app asks for %v, want cpu %s/%s memory %s/%s", p.Name, spec, cpuReq, cpuLim, memReq, memLim)
		}
		cs := cluster.ContainerStatus(&p, "app")
		if cs == nil || cs.Resources == nil || !sameResources(*cs.Resources, cpuReq, cpuLim, memReq, memLim) {
			t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu %s/%s memory %s/%s", p.Name, cs, cpuReq, cpuLim, memReq, memLim)
		}
	}
}

// templateResources fails unless the StatefulSet's template asks for these resources, and its
// current revision is its update revision: no pod is left to recreate.
func templateResources(t *testing.T, ns, cpuReq, cpuLim, memReq, memLim string) {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	must(t, err, "reading StatefulSet %s/web", ns)
	if r := sts.Spec.Template.Spec.Containers[0].Resources; !sameResources(r, cpuReq, cpuLim, memReq, memLim) {
		t.Errorf("StatefulSet web's template asks for %v, want cpu %s/%s memory %s/%s", r, cpuReq, cpuLim, memReq, memLim)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("StatefulSet web's strategy is %s, not restored", sts.Spec.UpdateStrategy.Type)
	}
	clitest.WaitStatefulSet(t, env, ns, "web", "current revision = update revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.CurrentRevision == s.Status.UpdateRevision && s.Status.UpdatedReplicas == 2
	})
}

func sameResources(r corev1.ResourceRequirements, cpuReq, cpuLim, memReq, memLim string) bool {
	eq := func(l corev1.ResourceList, name corev1.ResourceName, want string) bool {
		q, ok := l[name]
		return ok && q.Cmp(resource.MustParse(want)) == 0
	}
	return eq(r.Requests, corev1.ResourceCPU, cpuReq) && eq(r.Limits, corev1.ResourceCPU, cpuLim) &&
		eq(r.Requests, corev1.ResourceMemory, memReq) && eq(r.Limits, corev1.ResourceMemory, memLim)
}
