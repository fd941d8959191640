package tekton_test

import (
	"bytes"
	"flag"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-tekton.yaml from `kubectl kustomize config/tekton`")

// TestConfigTektonRenders: `kubectl kustomize config/tekton`, as a user applies it, renders the
// CRD, the controller's namespace, ServiceAccount, roles, bindings and Deployment as
// testdata/config-tekton.yaml holds them (run with -update after changing config/tekton, and
// read the diff).
func TestConfigTektonRenders(t *testing.T) {
	got := cluster.RenderConfig(t, "tekton", *update)
	for _, s := range []string{"kind: CustomResourceDefinition", "name: inplacerollouts.inplace-rollout.io",
		"kind: Namespace", "kind: ServiceAccount", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "kind: Role\n", "kind: RoleBinding",
		"kind: Deployment", "- tekton-controller", "- --health-addr=:8081", "runAsUser: 65532", "fieldPath: metadata.namespace",
		"name: inplace-rollout-tekton-controller\n", "namespace: inplace-rollout-system"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/tekton renders no %q", s)
		}
	}
}
