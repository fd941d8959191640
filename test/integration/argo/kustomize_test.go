package argo_test

import (
	"bytes"
	"flag"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-argo.yaml from `kubectl kustomize config/argo`")

// TestConfigArgoRenders: `kubectl kustomize config/argo`, as a user applies it, renders the
// plugins' ConfigMap entries, the ClusterRole and its binding as testdata/config-argo.yaml holds
// them (run with -update after changing config/argo, and read the diff).
func TestConfigArgoRenders(t *testing.T) {
	got := cluster.RenderConfig(t, "argo", *update)
	for _, s := range []string{"kind: ConfigMap", "name: argo-rollouts-config", "stepPlugins:", "trafficRouterPlugins:",
		"name: inplace-rollout/step", "name: inplace-rollout/traffic", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "name: argo-rollouts\n"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/argo renders no %q", s)
		}
	}
}
