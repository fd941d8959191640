package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// proxyRule is the one rule HTTP hooks need: a GET hook's request through the pod proxy is a get
// of pods/proxy, a POST hook's a create.
var proxyRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get", "create"}}

// grantsProxy reports whether a rule grants anything on pods/proxy.
func grantsProxy(rules []rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "pods/proxy") || slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, "pods/*")
	})
}

// TestChartHTTPHooks: by default no role the chart renders grants pods/proxy; with
// rbac.httpHooks the InPlaceRollout and Tekton controllers' ClusterRoles grant the rules of
// their least-privilege ClusterRole and of its HTTP hooks opt-in in config/, and nothing more,
// and the gate controller's stays as it was.
func TestChartHTTPHooks(t *testing.T) {
	for _, o := range objects(t, template(t, valueSets[1].set...)) {
		if k := o.GetKind(); (k == "ClusterRole" || k == "Role") && grantsProxy(rulesOf(t, o.Object)) {
			t.Errorf("%s %s grants pods/proxy without rbac.httpHooks", k, o.GetName())
		}
	}
	objs := objects(t, template(t, "rbac.httpHooks=true", "tektonController.enabled=true"))
	for _, c := range []struct{ component, config string }{{"controller", "controller"}, {"tekton-controller", "tekton"}} {
		name := release + "-inplace-rollout-" + c.component
		want := slices.Concat(configRole(t, c.config+"/clusterrole.yaml", "ClusterRole"), configRole(t, c.config+"/clusterrole-http-hooks.yaml", "ClusterRole"))
		if got := rulesOf(t, find(t, objs, "ClusterRole", name).Object); !reflect.DeepEqual(got, want) {
			t.Errorf("ClusterRole %s with rbac.httpHooks grants\n%v\nwant config/%s's clusterrole.yaml and clusterrole-http-hooks.yaml\n%v", name, got, c.config, want)
		}
	}
	if rules := rulesOf(t, find(t, objs, "ClusterRole", release+"-inplace-rollout-gate-controller").Object); grantsProxy(rules) {
		t.Errorf("the gate controller's ClusterRole grants pods/proxy with rbac.httpHooks: %v", rules)
	}
}

// configObjects decodes the documents of config/PATH.
func configObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", path))
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, string(data))
}

// TestHTTPHooksRoles: each driver's HTTP hooks opt-in in config/ grants the one rule HTTP hooks
// need, and binds it (the CLI's Role is bound by whoever runs the command, as its role.yaml) to
// the subjects the driver's own ClusterRoleBinding names, so that applying the file is all it
// takes.
func TestHTTPHooksRoles(t *testing.T) {
	for _, c := range []struct {
		dir, file, kind string
		// own is the name of the driver's ClusterRole and its binding in config/DIR.
		own string
	}{
		{"cli", "role-http-hooks.yaml", "Role", ""},
		{"argo", "clusterrole-http-hooks.yaml", "ClusterRole", "inplace-rollout-argo"},
		{"controller", "clusterrole-http-hooks.yaml", "ClusterRole", "inplace-rollout-controller"},
		{"tekton", "clusterrole-http-hooks.yaml", "ClusterRole", "inplace-rollout-tekton-controller"},
	} {
		t.Run(c.dir, func(t *testing.T) {
			path := c.dir + "/" + c.file
			if got := configRole(t, path, c.kind); !reflect.DeepEqual(got, []rbacv1.PolicyRule{proxyRule}) {
				t.Errorf("config/%s grants %v, want only %v", path, got, proxyRule)
			}
			objs := configObjects(t, path)
			if c.kind == "Role" {
				if len(objs) != 1 {
					t.Errorf("config/%s holds %d objects, want the Role alone", path, len(objs))
				}
				return
			}
			role := find(t, objs, "ClusterRole", c.own+"-http-hooks")
			var got, own rbacv1.ClusterRoleBinding
			fromUnstructured(t, find(t, objs, "ClusterRoleBinding", role.GetName()).Object, &got)
			fromUnstructured(t, find(t, configObjects(t, c.dir+"/clusterrolebinding.yaml"), "ClusterRoleBinding", c.own).Object, &own)
			if got.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.GetName()}) {
				t.Errorf("config/%s binds %+v, want its ClusterRole %s", path, got.RoleRef, role.GetName())
			}
			if !reflect.DeepEqual(got.Subjects, own.Subjects) {
				t.Errorf("config/%s binds %v, want config/%s/clusterrolebinding.yaml's subjects %v", path, got.Subjects, c.dir, own.Subjects)
			}
		})
	}
}

// fromUnstructured converts a decoded object into a typed one.
func fromUnstructured(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, into); err != nil {
		t.Fatalf("reading %v: %v", obj["metadata"], err)
	}
}
