package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// plugin is one entry of Argo's plugin lists.
type plugin struct {
	Name     string `json:"name"`
	Location string `json:"location"`
}

// argoHelmValues are the values of config/argo/helm-values.yaml, read strictly: a key Argo's
// chart does not have there is an error.
type argoHelmValues struct {
	Controller struct {
		StepPlugins          []plugin `json:"stepPlugins"`
		TrafficRouterPlugins []plugin `json:"trafficRouterPlugins"`
	} `json:"controller"`
	ProviderRBAC struct {
		AdditionalRules []rbacv1.PolicyRule `json:"additionalRules"`
	} `json:"providerRBAC"`
}

// TestArgoHelmValues: the values for Argo's own Helm chart add the plugins that
// config/argo/argo-rollouts-config.yaml lists and grant Argo's controller exactly the rules of
// config/argo/clusterrole.yaml (whose every rule test/integration/argo checks against the audit
// log), so that a Helm install of Argo and `kubectl apply -k config/argo` give the same.
func TestArgoHelmValues(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string, into any) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, "config", "argo", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			t.Fatalf("reading config/argo/%s: %v", name, err)
		}
	}
	var values argoHelmValues
	read("helm-values.yaml", &values)
	var role rbacv1.ClusterRole
	read("clusterrole.yaml", &role)
	if !reflect.DeepEqual(values.ProviderRBAC.AdditionalRules, role.Rules) {
		t.Errorf("helm-values.yaml's providerRBAC.additionalRules\n%v\ndiffer from clusterrole.yaml's rules\n%v", values.ProviderRBAC.AdditionalRules, role.Rules)
	}
	var config corev1.ConfigMap
	read("argo-rollouts-config.yaml", &config)
	for key, got := range map[string][]plugin{"stepPlugins": values.Controller.StepPlugins, "trafficRouterPlugins": values.Controller.TrafficRouterPlugins} {
		var want []plugin
		if err := yaml.UnmarshalStrict([]byte(config.Data[key]), &want); err != nil {
			t.Fatalf("reading argo-rollouts-config.yaml's %s: %v", key, err)
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("helm-values.yaml's controller.%s %v, want argo-rollouts-config.yaml's %v", key, got, want)
		}
	}
}
