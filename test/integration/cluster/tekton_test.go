package cluster

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSplitYAML(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one document", "a: 1\n", []string{"a: 1\n"}},
		{"leading separator", "---\na: 1\n", []string{"", "a: 1\n"}},
		{"two documents", "a: 1\n---\nb: 2\n", []string{"a: 1\n", "b: 2\n"}},
		{"separator inside a value is kept", "a: |\n  x --- y\n---\nb: 2\n", []string{"a: |\n  x --- y\n", "b: 2\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, d := range splitYAML([]byte(tt.in)) {
				got = append(got, string(d))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitYAML(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFreePortBelow(t *testing.T) {
	port, err := freePortBelow(maxKnativeMetricsPort)
	if err != nil {
		t.Fatal(err)
	}
	if port > maxKnativeMetricsPort || port <= 0 {
		t.Errorf("freePortBelow(%d) = %d", maxKnativeMetricsPort, port)
	}
}

// TestTektonManifestsAreWhereTheHarnessReadsThem reads every file of the Tekton module
// StartTekton applies, so that a version bump that moves one fails here, without a cluster.
func TestTektonManifestsAreWhereTheHarnessReadsThem(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := TektonModuleDir(root)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config")
	for _, f := range append(append([]string{filepath.Join("100-namespace", "100-namespace.yaml")}, tektonRBACFiles...), tektonConfigMaps...) {
		if _, err := os.Stat(filepath.Join(config, f)); err != nil {
			t.Errorf("Tekton %s: %v", TektonVersion, err)
		}
	}
	crds, _ := filepath.Glob(filepath.Join(config, "300-crds", "*.yaml"))
	if len(crds) == 0 {
		t.Errorf("Tekton %s: no CRDs in %s", TektonVersion, filepath.Join(config, "300-crds"))
	}
}
