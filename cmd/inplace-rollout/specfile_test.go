package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// specFile writes an InPlaceRollout file with spec (YAML, indented by two) and, when ns is set,
// metadata.namespace.
func specFile(t *testing.T, ns, spec string) string {
	t.Helper()
	doc := "apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nmetadata:\n  name: web\n"
	if ns != "" {
		doc += "  namespace: " + ns + "\n"
	}
	p := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(p, []byte(doc+"spec:\n"+spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// resolveArgs resolves run's flags as given on a command line, against a kubeconfig whose
// context's namespace is ns: no request is made.
func resolveArgs(t *testing.T, args ...string) (rollout.Spec, error) {
	t.Helper()
	var cf clusterFlags
	var rf rolloutFlags
	cmd := &cobra.Command{}
	cf.register(cmd)
	rf.register(cmd)
	if err := cmd.ParseFlags(append([]string{"--kubeconfig", offlineKubeconfig(t)}, args...)); err != nil {
		t.Fatal(err)
	}
	spec, _, err := rf.resolve(cmd, &cf)
	return spec, err
}

// TestFileSpec: -f reads the spec, in the command's namespace, and every flag given takes the
// place of the file's field.
func TestFileSpec(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n  batches: [1, 100%]\n"
	file := specFile(t, "", base)
	spec, err := resolveArgs(t, "-f", file)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Target != (rollout.Ref{Kind: rollout.StatefulSet, Namespace: "ns", Name: "web"}) || spec.Images["app"] != "reg/app:v2" ||
		len(spec.Batches) != 2 || spec.Holder != "cli" || !spec.Rerun {
		t.Errorf("spec %+v, want the file's in namespace ns", spec)
	}
	spec, err = resolveArgs(t, "-f", file, "--target", "daemonset/agent", "--image", "side=reg/side:v3", "--batches", "50%,100%",
		"--up-to", "50%", "--max-unavailable", "2", "--grace", "2s", "--soak", "3s", "--timeout", "4m", "--allow-unready",
		"--include-init", "--on-inconclusive", "fail", "--pin-digests", "never", "--supersede", "--take-over")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Target.Kind != rollout.DaemonSet || spec.Target.Name != "agent" || spec.Images["app"] != "reg/app:v2" || spec.Images["side"] != "reg/side:v3" ||
		len(spec.Batches) != 2 || spec.UpTo == nil || spec.MaxUnavailable.IntValue() != 2 || spec.GracePeriod != 2*time.Second ||
		spec.Soak != 3*time.Second || spec.Timeout != 4*time.Minute || !spec.AllowUnready || !spec.IncludeInit ||
		spec.OnInconclusive != rollout.InconclusiveFail || spec.PinDigests != rollout.PinNever || !spec.Supersede || !spec.TakeOver {
		t.Errorf("spec %+v, want every flag over the file", spec)
	}
}

// TestFileSpecRefusals: a file or flags that cannot make a spec are bad input naming what is
// wrong, before any request.
func TestFileSpecRefusals(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n"
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"no such file", func(*testing.T) []string { return []string{"-f", "/nonexistent/rollout.yaml"} }, "-f: "},
		{"another namespace", func(t *testing.T) []string { return []string{"-f", specFile(t, "other", base)} }, `metadata.namespace is "other" but the command runs in "ns"`},
		{"bad batches", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "--batches", "one,all"} }, "--batches"},
		{"bad image", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "--image", "app"} }, `--image "app"`},
		{"analysis without a file", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "--analysis", ""} }, "--analysis: give a file"},
		{"prometheus without an analysis", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base), "--prometheus", "http://prometheus:9090"}
		}, "--prometheus needs an analysis"},
		{"bad prometheus", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  analysis: {count: 1, prometheus: {address: http://prometheus:9090}}\n"), "--prometheus", "::"}
		}, "--prometheus: "},
		{"invalid spec", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "--timeout", "-1s"} }, "cannot be negative"},
		{"bad target flag", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "--target", "job/web"} }, "--target"},
		{"bad output", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base), "-o", "wide"} }, `--output "wide"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveArgs(t, tt.args(t)...)
			if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("resolve: %v (exit %d), want bad input with %q", err, exitCode(err), tt.want)
			}
		})
	}
}
