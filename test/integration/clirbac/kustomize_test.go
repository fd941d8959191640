package clirbac_test

import (
	"bytes"
	"flag"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-cli.yaml from `kubectl kustomize config/cli`")

// TestConfigCLIRenders: `kubectl kustomize config/cli`, as a user applies it, renders the Role
// as testdata/config-cli.yaml holds it (run with -update after changing config/cli, and read
// the diff): a namespaced Role only, which `kubectl apply -n` puts in the workloads' namespace.
func TestConfigCLIRenders(t *testing.T) {
	got := cluster.RenderConfig(t, "cli", *update)
	for _, s := range []string{"kind: Role\n", "name: inplace-rollout-cli\n"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/cli renders no %q", s)
		}
	}
	for _, s := range []string{"kind: ClusterRole", "namespace:"} {
		if bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/cli renders %q: the Role must be namespaced by whoever applies it, and grant nothing cluster-wide", s)
		}
	}
}
