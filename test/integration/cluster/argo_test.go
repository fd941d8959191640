package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestArgoConfigMapPointsEveryPluginAtTheBinary reads config/argo's ConfigMap as StartArgo does:
// every plugin it registers gets the binary's file:// location and sha256, and keeps its name.
func TestArgoConfigMapPointsEveryPluginAtTheBinary(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "inplace-rollout")
	if err := os.WriteFile(bin, []byte("a plugin binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("a plugin binary"))
	cm, err := argoConfigMap(filepath.Join(root, "config", "argo", "argo-rollouts-config.yaml"), bin)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "argo-rollouts-config" || cm.Namespace != ArgoNamespace {
		t.Errorf("ConfigMap %s/%s, want %s/argo-rollouts-config", cm.Namespace, cm.Name, ArgoNamespace)
	}
	for key, name := range map[string]string{"stepPlugins": "inplace-rollout/step", "trafficRouterPlugins": "inplace-rollout/traffic"} {
		var items []map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &items); err != nil {
			t.Fatalf("data.%s: %v", key, err)
		}
		want := []map[string]any{{"name": name, "location": "file://" + bin, "sha256": hex.EncodeToString(sum[:])}}
		if len(items) != 1 || !maps.Equal(items[0], want[0]) {
			t.Errorf("data.%s = %v, want %v", key, items, want)
		}
	}
}

// TestAuditedCallsReadsOneRequestOnce: a watch logs two events and counts once; other users'
// requests and non-resource requests are left out.
func TestAuditedCallsReadsOneRequestOnce(t *testing.T) {
	c := &Cluster{Dir: t.TempDir(), opts: Options{AuditLog: true}}
	lines := []string{
		`{"auditID":"1","stage":"ResponseStarted","verb":"watch","user":{"username":"` + ArgoUser + `"},"objectRef":{"resource":"pods"}}`,
		`{"auditID":"1","stage":"ResponseComplete","verb":"watch","user":{"username":"` + ArgoUser + `"},"objectRef":{"resource":"pods"}}`,
		`{"auditID":"2","stage":"ResponseComplete","verb":"patch","user":{"username":"` + ArgoUser + `"},"objectRef":{"resource":"statefulsets","apiGroup":"apps","namespace":"a"}}`,
		`{"auditID":"3","stage":"ResponseComplete","verb":"patch","user":{"username":"` + ArgoUser + `"},"objectRef":{"resource":"statefulsets","apiGroup":"apps","namespace":"b"}}`,
		`{"auditID":"4","stage":"ResponseComplete","verb":"patch","user":{"username":"` + ArgoUser + `"},"objectRef":{"resource":"pods","subresource":"status","namespace":"a"}}`,
		`{"auditID":"5","stage":"ResponseComplete","verb":"get","user":{"username":"someone-else"},"objectRef":{"resource":"secrets","namespace":"a"}}`,
		`{"auditID":"6","stage":"ResponseComplete","verb":"get","user":{"username":"` + ArgoUser + `"},"requestURI":"/version"}`,
	}
	if err := os.WriteFile(c.auditLogPath(), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := c.AuditedCalls(ArgoUser)
	if err != nil {
		t.Fatal(err)
	}
	want := map[APICall]int{
		{Resource: "pods", Verb: "watch"}:                                             1,
		{APIGroup: "apps", Resource: "statefulsets", Verb: "patch", Namespaced: true}: 2,
		{Resource: "pods", Subresource: "status", Verb: "patch", Namespaced: true}:    1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	// A user the policy does not log would read as one that called nothing.
	if _, err := c.AuditedCalls("someone-else"); err == nil || !strings.Contains(err.Error(), "Options.AuditUsers") {
		t.Errorf("AuditedCalls of a user the policy does not log: error %v, want one naming Options.AuditUsers", err)
	}
}
