package helm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The chart's CRDs.
var crds = []string{"inplacerollouts.inplace-rollout.io", "inplacerolloutpolicies.inplace-rollout.io"}

// installed are the kinds the chart creates, with whether they are namespaced: what `helm
// uninstall` must leave none of.
var installed = []struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	{schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
}

// TestHelmInstallRollsOutAndUninstallLeavesNothing: `helm install` of the chart's defaults into
// a namespace of its own installs the CRDs and the controllers' ServiceAccounts, roles, Leases
// and Deployments; the InPlaceRollout controller, run as the ServiceAccount the chart created
// (as its Deployment runs it, the simulator's pods running no process), with only the roles the
// chart granted, rolls a StatefulSet out in place to Succeeded; `helm uninstall` then leaves no
// object of the release but the CRDs it keeps (crds.keep), with the InPlaceRollout in them.
func TestHelmInstallRollsOutAndUninstallLeavesNothing(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const rel = "ipr"
	mustHelm(t, "install", rel, chartDir(t), "--namespace", ns)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crdClient := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, name := range crds {
		cluster.WaitFor(t, time.Minute, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
			crd, err := crdClient.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			return slices.ContainsFunc(conditions, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}), nil
		})
	}
	t.Cleanup(func() {
		for _, name := range crds {
			_ = crdClient.Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})

	controller, err := env.StartInstalledController(ctx, cli, "controller", ns, rel+"-inplace-rollout-controller")
	if err != nil {
		t.Fatalf("starting the controller as the chart's ServiceAccount: %v", err)
	}
	t.Cleanup(func() { _ = controller.Kill() })
	apps := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, apps, "web", 3)
	rollouts := dyn.Resource(schema.GroupVersionResource{Group: "inplace-rollout.io", Version: "v1alpha1", Resource: "inplacerollouts"}).Namespace(apps)
	_, err = rollouts.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inplace-rollout.io/v1alpha1",
		"kind":       "InPlaceRollout",
		"metadata":   map[string]any{"name": "web"},
		"spec": map[string]any{
			"target":  map[string]any{"kind": "StatefulSet", "name": "web"},
			"images":  map[string]any{"app": clitest.AppV2},
			"batches": []any{int64(1), "100%"},
			"timeout": "2m",
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating InPlaceRollout %s/web: %v", apps, err)
	}
	cluster.WaitFor(t, 3*time.Minute, "InPlaceRollout "+apps+"/web Succeeded", func(ctx context.Context) (bool, error) {
		r, err := rollouts.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(r.Object, "status", "phase")
		if phase == "Failed" || phase == "RolledBack" {
			return false, fmt.Errorf("phase %s: %v", phase, r.Object["status"])
		}
		return phase == "Succeeded", nil
	})
	if err := controller.Kill(); err != nil {
		t.Fatal(err)
	}

	mustHelm(t, "uninstall", rel, "--namespace", ns, "--wait")
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel}
	for _, k := range installed {
		var list *unstructured.UnstructuredList
		if k.namespaced {
			list, err = dyn.Resource(k.gvr).Namespace(ns).List(ctx, selector)
		} else {
			list, err = dyn.Resource(k.gvr).List(ctx, selector)
		}
		if err != nil {
			t.Fatalf("listing %s: %v", k.gvr.Resource, err)
		}
		for _, o := range list.Items {
			t.Errorf("helm uninstall left %s %s/%s", k.gvr.Resource, o.GetNamespace(), o.GetName())
		}
	}
	for _, name := range crds {
		if _, err := crdClient.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s, which crds.keep keeps: %v", name, err)
		}
	}
	if _, err := rollouts.Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("InPlaceRollout %s/web after helm uninstall, which keeps the CRDs: %v", apps, err)
	}
	if r := helm(t, "status", rel, "--namespace", ns); r.err == nil {
		t.Errorf("helm status %s after helm uninstall found the release:\n%s", rel, r.stdout)
	}
}
