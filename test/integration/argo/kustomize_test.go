package argo_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-argo.yaml from `kubectl kustomize config/argo`")

// TestConfigArgoRenders: `kubectl kustomize config/argo`, as a user applies it, renders the
// plugins' ConfigMap entries, the ClusterRole and its binding as testdata/config-argo.yaml holds
// them (run with -update after changing config/argo, and read the diff).
func TestConfigArgoRenders(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), "kustomize", filepath.Join(root, "config", "argo"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/argo: %v\n%s", err, stderr.String())
	}
	golden := filepath.Join("testdata", "config-argo.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("reading %s (run with -update to write it): %v", golden, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("kubectl kustomize config/argo renders differently from %s (run with -update and read the diff):\n%s", golden, got)
	}
	for _, s := range []string{"kind: ConfigMap", "name: argo-rollouts-config", "stepPlugins:", "trafficRouterPlugins:",
		"name: inplace-rollout/step", "name: inplace-rollout/traffic", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "name: argo-rollouts\n"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/argo renders no %q", s)
		}
	}
}
