package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RenderConfig renders config/NAME with `kubectl kustomize`, as a user applies it, and fails t
// unless the result is what the calling package's testdata/config-NAME.yaml holds; with update
// it rewrites that file first (run the test with -update after changing config/NAME, and read
// the diff). It returns the rendered YAML for the caller's own checks.
func RenderConfig(t testing.TB, name string, update bool) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), "kustomize", filepath.Join(root, "config", name))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v\n%s", name, err, stderr.String())
	}
	golden := filepath.Join("testdata", "config-"+name+".yaml")
	if update {
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
		t.Errorf("kubectl kustomize config/%s renders differently from %s (run with -update and read the diff):\n%s", name, golden, got)
	}
	return got
}
