package tekton_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-tekton.yaml from `kubectl kustomize config/tekton`")

// TestConfigTektonRenders: `kubectl kustomize config/tekton`, as a user applies it, renders the
// CRD, the controller's namespace, ServiceAccount, roles, bindings and Deployment as
// testdata/config-tekton.yaml holds them (run with -update after changing config/tekton, and
// read the diff).
func TestConfigTektonRenders(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), "kustomize", filepath.Join(root, "config", "tekton"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/tekton: %v\n%s", err, stderr.String())
	}
	golden := filepath.Join("testdata", "config-tekton.yaml")
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
		t.Errorf("kubectl kustomize config/tekton renders differently from %s (run with -update and read the diff):\n%s", golden, got)
	}
	for _, s := range []string{"kind: CustomResourceDefinition", "name: inplacerollouts.inplace-rollout.io",
		"kind: Namespace", "kind: ServiceAccount", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "kind: Role\n", "kind: RoleBinding",
		"kind: Deployment", "- tekton-controller", "- --health-addr=:8081", "runAsUser: 65532", "fieldPath: metadata.namespace",
		"name: inplace-rollout-tekton-controller\n", "namespace: inplace-rollout-system"} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("kubectl kustomize config/tekton renders no %q", s)
		}
	}
}
