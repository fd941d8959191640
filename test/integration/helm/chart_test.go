package helm

import (
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/inplace-rollout/inplace-rollout/config/grafana"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml from `helm template`")

// release and namespace are those every template test renders for.
const (
	release   = "ipr"
	namespace = "delivery"
)

// digest is an image digest the tests pin.
const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// valueSets are the values the golden files render: the defaults, everything on, the
// controller alone without CRDs, and the controllers' roles opened to HTTP hooks.
var valueSets = []struct {
	name string
	set  []string
}{
	{"defaults", nil},
	{"everything", []string{"tektonController.enabled=true", "image.digest=" + digest, "imagePullSecrets[0].name=regcred",
		"controller.replicas=2", "controller.extraArgs[0]=--workers=8", "gateController.nodeSelector.role=infra", "crds.keep=false",
		"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prometheus", "metrics.dashboard.enabled=true",
		"metrics.argoPlugins.podMonitor.enabled=true", "metrics.argoPlugins.podMonitor.labels.release=prometheus"}},
	{"no-crds", []string{"crds.install=false", "gateController.enabled=false", "image.tag=v9.9.9"}},
	{"http-hooks", []string{"rbac.httpHooks=true", "tektonController.enabled=true", "crds.install=false"}},
}

// template renders the chart with the values set.
func template(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"template", release, chartDir(t), "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return mustHelm(t, args...)
}

// TestChartLints: helm lint --strict passes on the defaults and with every component on.
func TestChartLints(t *testing.T) {
	mustHelm(t, "lint", "--strict", chartDir(t))
	mustHelm(t, "lint", "--strict", chartDir(t), "--set", "tektonController.enabled=true", "--set", "image.digest="+digest)
}

// TestChartRenders: helm template renders each value set as testdata/NAME.yaml holds it (run
// with -update after changing the chart or config/, and read the diff).
func TestChartRenders(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			got := template(t, vs.set...)
			golden := filepath.Join("testdata", vs.name+".yaml")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading %s (run with -update to write it): %v", golden, err)
			}
			if got != string(want) {
				t.Errorf("helm template with %v renders differently from %s (run with -update and read the diff):\n%s", vs.set, golden, got)
			}
		})
	}
}

// objects decodes a multi-document render.
func objects(t *testing.T, rendered string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding the render: %v", err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// find returns the rendered object of kind and name, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the render has no %s %s", kind, name)
	return nil
}

// rulesOf converts a rendered or read role's rules.
func rulesOf(t *testing.T, obj map[string]any) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &role); err != nil {
		t.Fatalf("reading the rules of %v: %v", obj["metadata"], err)
	}
	return role.Rules
}

// configRole reads the document of kind in config/PATH.
func configRole(t *testing.T, path, kind string) []rbacv1.PolicyRule {
	t.Helper()
	for _, o := range configObjects(t, path) {
		if o.GetKind() == kind {
			return rulesOf(t, o.Object)
		}
	}
	t.Fatalf("config/%s has no %s", path, kind)
	return nil
}

// TestChartRolesAreConfigs: every component the chart installs gets the least-privilege roles of
// config/ (which the controllers' tests check against the audit log) and nothing more, its
// Deployment runs its subcommand on the pinned image as its own ServiceAccount, and what holds a
// Lease elects on the Lease the chart creates.
func TestChartRolesAreConfigs(t *testing.T) {
	objs := objects(t, template(t, valueSets[1].set...))
	for _, c := range []struct {
		component, clusterRole, role string
		lease                        bool
	}{
		{"controller", "controller/clusterrole.yaml", "controller/role.yaml", true},
		{"tekton-controller", "tekton/clusterrole.yaml", "tekton/role.yaml", true},
		{"gate-controller", "gate-controller/rbac.yaml", "", false},
	} {
		t.Run(c.component, func(t *testing.T) {
			name := release + "-inplace-rollout-" + c.component
			if got, want := rulesOf(t, find(t, objs, "ClusterRole", name).Object), configRole(t, c.clusterRole, "ClusterRole"); !reflect.DeepEqual(got, want) {
				t.Errorf("ClusterRole %s grants\n%v\nwant config/%s's\n%v", name, got, c.clusterRole, want)
			}
			binding := find(t, objs, "ClusterRoleBinding", name)
			subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
			if want := []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": namespace}}; !reflect.DeepEqual(subjects, want) {
				t.Errorf("ClusterRoleBinding %s binds %v, want %v", name, subjects, want)
			}
			if c.lease {
				if got, want := rulesOf(t, find(t, objs, "Role", name).Object), configRole(t, c.role, "Role"); !reflect.DeepEqual(got, want) {
					t.Errorf("Role %s grants %v, want config/%s's %v", name, got, c.role, want)
				}
				if lease := find(t, objs, "Lease", name); lease.GetNamespace() != namespace {
					t.Errorf("Lease %s is in namespace %q, want %q", name, lease.GetNamespace(), namespace)
				}
			}
			dep := find(t, objs, "Deployment", name)
			containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 {
				t.Fatalf("Deployment %s has %d containers, want 1", name, len(containers))
			}
			ctr := containers[0].(map[string]any)
			if want := "ghcr.io/inplace-rollout/inplace-rollout@" + digest; ctr["image"] != want {
				t.Errorf("Deployment %s runs image %v, want %s", name, ctr["image"], want)
			}
			args, _ := ctr["args"].([]any)
			if len(args) == 0 || args[0] != c.component {
				t.Errorf("Deployment %s runs args %v, want the subcommand %s first", name, args, c.component)
			}
			if hasID := slices.Contains(args, any("--leader-election-id="+name)); hasID != c.lease {
				t.Errorf("Deployment %s args %v: --leader-election-id=%s there %v, want %v", name, args, name, hasID, c.lease)
			}
			if sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName"); sa != name {
				t.Errorf("Deployment %s runs as ServiceAccount %q, want %q", name, sa, name)
			}
		})
	}
}

// TestChartRefusesBadValues: values.schema.json refuses, naming the value, what the chart would
// otherwise ignore or render wrong; nothing is rendered.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set, names string
	}{
		{"controler.enabled=true", "controler"},
		{"image.digest=sha256:abc", "digest"},
		{"controller.replicas=-1", "replicas"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"gateController.extraArgs=--x", "extraArgs"},
		{"metrics.argoPlugins.stepPort=0", "stepPort"},
		{"rbac.httpHooks=yes", "httpHooks"},
		{"rbac.httphooks=true", "httphooks"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			r := helm(t, "template", release, chartDir(t), "--namespace", namespace, "--set", tc.set)
			if r.err == nil {
				t.Fatalf("helm template --set %s rendered:\n%s", tc.set, r.stdout)
			}
			if !strings.Contains(r.stderr, tc.names) {
				t.Errorf("helm template --set %s failed without naming %s:\n%s", tc.set, tc.names, r.stderr)
			}
			if strings.Contains(r.stdout, "kind:") {
				t.Errorf("helm template --set %s printed objects although it failed:\n%s", tc.set, r.stdout)
			}
		})
	}
}

// TestChartMetrics: with metrics on, each controller that serves /metrics gets a Service on its
// health port and a ServiceMonitor of it, and the Grafana dashboard is config/grafana's, byte
// for byte, in a ConfigMap labelled for Grafana's sidecar.
func TestChartMetrics(t *testing.T) {
	objs := objects(t, template(t, valueSets[1].set...))
	for _, c := range []string{"controller", "tekton-controller"} {
		name := release + "-inplace-rollout-" + c
		svc := find(t, objs, "Service", name+"-metrics")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if len(ports) != 1 || ports[0].(map[string]any)["targetPort"] != "health" {
			t.Errorf("Service %s-metrics ports %v, want the health port", name, ports)
		}
		sm := find(t, objs, "ServiceMonitor", name)
		if sm.GetLabels()["release"] != "prometheus" {
			t.Errorf("ServiceMonitor %s labels %v, want release=prometheus", name, sm.GetLabels())
		}
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" && strings.Contains(o.GetName(), "gate-controller") {
			t.Errorf("ServiceMonitor %s: the gate controller serves no /metrics", o.GetName())
		}
	}
	checkArgoPodMonitor(t, find(t, objs, "PodMonitor", release+"-inplace-rollout-argo-plugins"))
	cm := find(t, objs, "ConfigMap", release+"-inplace-rollout-dashboard")
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s labels %v, want grafana_dashboard=1", cm.GetName(), cm.GetLabels())
	}
	got, _, _ := unstructured.NestedString(cm.Object, "data", "inplace-rollout.json")
	if want := strings.TrimSuffix(string(grafana.JSON), "\n"); got != want {
		t.Errorf("the dashboard in ConfigMap %s differs from config/grafana/inplace-rollout.json", cm.GetName())
	}
}

// checkArgoPodMonitor: the PodMonitor of the Argo plugins selects Argo's controller pods in
// Argo's namespace by its named metrics port, and scrapes each plugin at the port of the
// --metrics-addr docs/observability.md gives it, labelled with the plugin's name.
func checkArgoPodMonitor(t *testing.T, pm *unstructured.Unstructured) {
	t.Helper()
	if pm.GetNamespace() != namespace || pm.GetLabels()["release"] != "prometheus" {
		t.Errorf("PodMonitor %s in %q with labels %v, want the release's namespace %q and release=prometheus", pm.GetName(), pm.GetNamespace(), pm.GetLabels(), namespace)
	}
	if ns, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(ns, []string{"argo-rollouts"}) {
		t.Errorf("PodMonitor %s namespaces %v, want [argo-rollouts]", pm.GetName(), ns)
	}
	if sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels"); sel["app.kubernetes.io/name"] != "argo-rollouts" {
		t.Errorf("PodMonitor %s selector %v, want Argo Rollouts' pods", pm.GetName(), sel)
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	want := map[string]string{"inplace-rollout/step": "$1:9091", "inplace-rollout/traffic": "$1:9092"}
	if len(eps) != len(want) {
		t.Fatalf("PodMonitor %s has %d endpoints, want one per plugin: %v", pm.GetName(), len(eps), eps)
	}
	for _, e := range eps {
		ep := e.(map[string]any)
		if ep["port"] != "metrics" || ep["path"] != "/metrics" {
			t.Errorf("PodMonitor endpoint %v: want port metrics (Argo's) and path /metrics", ep)
		}
		rl, _ := ep["relabelings"].([]any)
		if len(rl) != 2 {
			t.Fatalf("PodMonitor endpoint relabelings %v, want the address and the plugin label", rl)
		}
		addr, plugin := rl[0].(map[string]any), rl[1].(map[string]any)
		if addr["targetLabel"] != "__address__" || !slices.Equal(addr["sourceLabels"].([]any), []any{"__meta_kubernetes_pod_ip"}) {
			t.Errorf("PodMonitor relabeling %v: want the pod IP as __address__", addr)
		}
		name, _ := plugin["replacement"].(string)
		if plugin["targetLabel"] != "plugin" || want[name] == "" || addr["replacement"] != want[name] {
			t.Errorf("PodMonitor endpoint %v: want plugin label and address %v", ep, want)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("PodMonitor %s scrapes no endpoint of %v", pm.GetName(), want)
	}
}

// TestReleaseChart packages the chart as `make release` does (hack/chart-package.sh): every
// container of the packaged chart runs the release's image by its digest, the chart's version is
// the release's as a semantic version and its appVersion the release's own; a digest that is not
// one is refused and nothing is written.
func TestReleaseChart(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "hack", "chart-package.sh")
	for _, tc := range []struct{ version, file string }{
		{"v1.2.3", "inplace-rollout-1.2.3.tgz"},
		{"2edb11d", "inplace-rollout-0.0.0-2edb11d.tgz"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			out := t.TempDir()
			if b, err := exec.Command(script, out, digest, tc.version).CombinedOutput(); err != nil {
				t.Fatalf("%s %s %s %s: %v\n%s", script, out, digest, tc.version, err, b)
			}
			pkg := filepath.Join(out, tc.file)
			meta := mustHelm(t, "show", "chart", pkg)
			if !strings.Contains(meta, "\nappVersion: "+tc.version+"\n") {
				t.Errorf("the packaged chart's Chart.yaml has no appVersion %s:\n%s", tc.version, meta)
			}
			images := 0
			for _, o := range objects(t, mustHelm(t, "template", release, pkg, "--namespace", namespace, "--set", "tektonController.enabled=true")) {
				if o.GetKind() != "Deployment" {
					continue
				}
				ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				for _, c := range ctrs {
					images++
					if got, want := c.(map[string]any)["image"], "ghcr.io/inplace-rollout/inplace-rollout@"+digest; got != want {
						t.Errorf("Deployment %s of the packaged chart runs %v, want %s", o.GetName(), got, want)
					}
				}
			}
			if images < 3 {
				t.Errorf("the packaged chart rendered %d containers, want the three controllers'", images)
			}
		})
	}
	t.Run("not a digest", func(t *testing.T) {
		out := t.TempDir()
		b, err := exec.Command(script, out, "sha256:abc", "v1.2.3").CombinedOutput()
		if err == nil || !strings.Contains(string(b), "not an image digest") {
			t.Fatalf("%s with digest sha256:abc: %v, want a refusal naming the digest:\n%s", script, err, b)
		}
		if ents, _ := os.ReadDir(out); len(ents) > 0 {
			t.Errorf("a refused package wrote %v", ents)
		}
	})
}
