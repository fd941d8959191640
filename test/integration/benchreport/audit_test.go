package benchreport

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientOf(t *testing.T) {
	tests := []struct{ userAgent, want string }{
		{"inplace-rollout/v0.4.0", "inplace-rollout"},
		{"kube-controller-manager/v1.34.5 (linux/amd64) kubernetes/0000000/statefulset-controller", "kube-controller-manager/statefulset-controller"},
		{"kube-controller-manager/v1.34.5 (linux/amd64) kubernetes/0000000/shared-informers", "kube-controller-manager/shared-informers"},
		{"kube-apiserver/v1.34.5 (linux/amd64) kubernetes/0000000", "kube-apiserver"},
		{"kruise-manager", "kruise-manager"},
		{"benchreport/v0.0.0 (linux/amd64) kubernetes/$Format", "benchreport"},
		{"Go-http-client/2.0", "Go-http-client"},
		{"", "(no User-Agent)"},
	}
	for _, tt := range tests {
		if got := clientOf(tt.userAgent); got != tt.want {
			t.Errorf("clientOf(%q) = %q, want %q", tt.userAgent, got, tt.want)
		}
	}
}

// TestAuditWindowCountsEachRequestOnce: the window counts what the log holds after it opened,
// one per request (a watch logs two events), by client, resource and verb.
func TestAuditWindowCountsEachRequestOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	before := `{"auditID":"0","stage":"ResponseComplete","verb":"delete","userAgent":"inplace-rollout/dev","objectRef":{"resource":"pods"}}` + "\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openAuditWindow(path)
	if err != nil {
		t.Fatal(err)
	}
	const kcm = "kube-controller-manager/v1.34.5 (linux/amd64) kubernetes/0000000/statefulset-controller"
	lines := []string{
		`{"auditID":"1","stage":"ResponseStarted","verb":"watch","userAgent":"inplace-rollout/dev","objectRef":{"resource":"pods","namespace":"a"}}`,
		`{"auditID":"2","stage":"ResponseComplete","verb":"patch","userAgent":"inplace-rollout/dev","objectRef":{"resource":"pods","namespace":"a","name":"p-0"}}`,
		`{"auditID":"3","stage":"ResponseComplete","verb":"patch","userAgent":"inplace-rollout/dev","objectRef":{"resource":"pods","namespace":"a","name":"p-1"}}`,
		`{"auditID":"1","stage":"ResponseComplete","verb":"watch","userAgent":"inplace-rollout/dev","objectRef":{"resource":"pods","namespace":"a"}}`,
		`{"auditID":"4","stage":"ResponseComplete","verb":"patch","userAgent":"kubelet-simulator","objectRef":{"resource":"pods","subresource":"status","namespace":"a"}}`,
		`{"auditID":"5","stage":"ResponseComplete","verb":"update","userAgent":"` + kcm + `","objectRef":{"resource":"statefulsets","subresource":"status","apiGroup":"apps","namespace":"a"}}`,
		`{"auditID":"6","stage":"ResponseComplete","verb":"get","userAgent":"kruise-manager","requestURI":"/apis/apps.kruise.io/v1alpha1"}`,
		"",
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(lines, "\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := w.calls()
	if err != nil {
		t.Fatal(err)
	}
	want := map[Call]int{
		{"inplace-rollout", "pods", "watch"}:                                                     1,
		{"inplace-rollout", "pods", "patch"}:                                                     2,
		{"kubelet-simulator", "pods/status", "patch"}:                                            1,
		{"kube-controller-manager/statefulset-controller", "statefulsets/status.apps", "update"}: 1,
		{"kruise-manager", nonResource, "get"}:                                                   1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if _, err := parseAuditString("not json\n"); err == nil {
		t.Error("a line that is not JSON: no error")
	}
}

func parseAuditString(s string) (map[Call]int, error) { return parseAudit(strings.NewReader(s)) }
