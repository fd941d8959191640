package rollout_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/config-gate-controller.yaml from `kubectl kustomize config/gate-controller`")

// TestConfigGateControllerRenders: `kubectl kustomize config/gate-controller`, as a user applies
// it, renders what testdata/config-gate-controller.yaml holds (run with -update after changing
// config/gate-controller, and read the diff); the API server accepts all of it (a server-side dry
// run), and its parts fit together: the Deployment runs the gate-controller command as the
// ServiceAccount the ClusterRoleBinding grants the ClusterRole to, and probes the port it serves
// its health on.
func TestConfigGateControllerRenders(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(filepath.Join(bins, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	dir := filepath.Join(root, "config", "gate-controller")
	got := cluster.RenderConfig(t, "gate-controller", *update)

	// The namespace must exist for a dry run of what goes in it; it is the one the shipped
	// configuration creates, and other tests apply it too.
	kubectl("apply", "-f", filepath.Join(dir, "namespace.yaml"))
	kubectl("apply", "--dry-run=server", "-k", dir)

	var (
		dep     *appsv1.Deployment
		sas     []metav1.ObjectMeta
		role    *rbacv1.ClusterRole
		binding *rbacv1.ClusterRoleBinding
	)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(got), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		if err := utilyaml.Unmarshal(raw.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "Deployment":
			dep = &appsv1.Deployment{}
			into = dep
		case "ServiceAccount":
			var sa corev1.ServiceAccount
			if err := utilyaml.Unmarshal(raw.Raw, &sa); err != nil {
				t.Fatal(err)
			}
			sas = append(sas, sa.ObjectMeta)
			continue
		case "ClusterRole":
			role = &rbacv1.ClusterRole{}
			into = role
		case "ClusterRoleBinding":
			binding = &rbacv1.ClusterRoleBinding{}
			into = binding
		default:
			continue
		}
		if err := utilyaml.Unmarshal(raw.Raw, into); err != nil {
			t.Fatal(err)
		}
	}
	if dep == nil || role == nil || binding == nil || len(sas) != 1 {
		t.Fatalf("rendered Deployment %v, ClusterRole %v, ClusterRoleBinding %v, %d ServiceAccounts; want one of each", dep != nil, role != nil, binding != nil, len(sas))
	}
	sa := sas[0]
	if spec := dep.Spec.Template.Spec; spec.ServiceAccountName != sa.Name || dep.Namespace != sa.Namespace {
		t.Errorf("Deployment %s/%s runs as ServiceAccount %q; want %s/%s", dep.Namespace, dep.Name, spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name ||
		!slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa.Name && s.Namespace == sa.Namespace
		}) {
		t.Errorf("ClusterRoleBinding %s grants %s %s to %+v; want ClusterRole %s to ServiceAccount %s/%s",
			binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name, binding.Subjects, role.Name, sa.Namespace, sa.Name)
	}
	if n := len(dep.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment has %d containers, want 1", n)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "gate-controller" || !slices.Contains(c.Args, "--health-addr=:8081") {
		t.Errorf("container args %q; want the gate-controller command serving its health on :8081", c.Args)
	}
	for what, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", what)
			continue
		}
		port := probe.HTTPGet.Port
		if port.String() != "8081" && !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port.String() && p.ContainerPort == 8081 }) {
			t.Errorf("%s probe on port %s; want 8081, where the command serves its health", what, port.String())
		}
	}
}
