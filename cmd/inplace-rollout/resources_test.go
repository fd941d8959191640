package main

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// res builds resources from "requests cpu=200m,memory=64Mi limits cpu=400m".
func res(t *testing.T, s string) inplace.Resources {
	t.Helper()
	var r inplace.Resources
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i += 2 {
		l := corev1.ResourceList{}
		for _, kv := range strings.Split(f[i+1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		switch f[i] {
		case "requests":
			r.Requests = l
		case "limits":
			r.Limits = l
		default:
			t.Fatalf("res(%q): %q is neither requests nor limits", s, f[i])
		}
	}
	return r
}

// sameResources reports whether got and want set the same values, by quantity.
func sameResources(got, want map[string]inplace.Resources) bool {
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		return false
	}
	for name, w := range want {
		g := got[name]
		if len(g.Requests) != len(w.Requests) || len(g.Limits) != len(w.Limits) || !inplace.HasResources(g, w) {
			return false
		}
	}
	return true
}

// TestRunTakesResources: --requests and --limits, one container a value, or --resources as the
// spec writes them, make the spec's resources, beside images or alone; -f's resources take the
// flags' values over them, value by value.
func TestRunTakesResources(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n"
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want map[string]inplace.Resources
	}{
		{"requests and limits", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--requests", "app=cpu=200m,memory=64Mi", "--limits", "app=cpu=400m", "--requests", "side=memory=32Mi"}
		}, map[string]inplace.Resources{"app": res(t, "requests cpu=200m,memory=64Mi limits cpu=400m"), "side": res(t, "requests memory=32Mi")}},
		{"beside an image", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--image", "app=reg/app:v2", "--limits", "app=memory=1Gi"}
		}, map[string]inplace.Resources{"app": res(t, "limits memory=1Gi")}},
		{"as the spec writes them", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--resources", "{app: {requests: {cpu: 0.5}, limits: {cpu: 1}}}"}
		}, map[string]inplace.Resources{"app": res(t, "requests cpu=500m limits cpu=1")}},
		{"empty --resources is none", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--image", "app=reg/app:v2", "--resources", ""}
		}, nil},
		{"from the file", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requests: {cpu: 100m}, limits: {cpu: 200m}}}\n")}
		}, map[string]inplace.Resources{"app": res(t, "requests cpu=100m limits cpu=200m")}},
		{"the file alone, no images", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", "  target: {kind: StatefulSet, name: web}\n  resources: {app: {requests: {memory: 64Mi}}}\n")}
		}, map[string]inplace.Resources{"app": res(t, "requests memory=64Mi")}},
		{"flags over the file, value by value", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m}}}\n"),
				"--requests", "app=cpu=150m", "--limits", "side=cpu=1"}
		}, map[string]inplace.Resources{"app": res(t, "requests cpu=150m,memory=64Mi limits cpu=200m"), "side": res(t, "limits cpu=1")}},
		{"--resources in place of the file's", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requests: {cpu: 100m}}}\n"), "--resources", `{"side": {"limits": {"memory": "128Mi"}}}`}
		}, map[string]inplace.Resources{"side": res(t, "limits memory=128Mi")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := resolveArgs(t, tt.args(t)...)
			if err != nil {
				t.Fatal(err)
			}
			if !sameResources(spec.Resources, tt.want) {
				t.Errorf("resources %v, want %v", spec.Resources, tt.want)
			}
		})
	}
}

// TestRunRefusesBadResources: a value --requests, --limits or --resources cannot take is bad
// input, before any request, naming the flag and the value.
func TestRunRefusesBadResources(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n"
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"no container", func(*testing.T) []string { return []string{"--requests", "=cpu=1"} }, `--requests "=cpu=1": no container name`},
		{"no values", func(*testing.T) []string { return []string{"--limits", "app"} }, `--limits "app": use CONTAINER=RESOURCE=QUANTITY`},
		{"nothing after the container", func(*testing.T) []string { return []string{"--limits", "app="} }, `--limits "app=": use CONTAINER=RESOURCE=QUANTITY`},
		{"kubectl's form without the container", func(*testing.T) []string { return []string{"--requests", "cpu=200m"} }, `--requests "cpu=200m": "200m" is not RESOURCE=QUANTITY`},
		{"no quantity", func(*testing.T) []string { return []string{"--requests", "app=cpu="} }, `--requests "app=cpu=": "cpu=" is not RESOURCE=QUANTITY`},
		{"unparsable quantity", func(*testing.T) []string { return []string{"--requests", "app=cpu=lots"} }, `--requests "app=cpu=lots": cpu "lots" is not a quantity`},
		{"a unit of its own", func(*testing.T) []string { return []string{"--limits", "app=memory=64MB"} }, `--limits "app=memory=64MB": memory "64MB" is not a quantity`},
		{"another resource", func(*testing.T) []string { return []string{"--requests", "app=ephemeral-storage=1Gi"} },
			`--requests "app=ephemeral-storage=1Gi": "ephemeral-storage": only cpu and memory change in place`},
		{"below zero", func(*testing.T) []string { return []string{"--limits", "app=cpu=-1"} }, `--limits "app=cpu=-1": cpu -1 is below zero`},
		{"a resource twice", func(*testing.T) []string { return []string{"--requests", "app=cpu=1,cpu=2"} }, `--requests "app=cpu=1,cpu=2": cpu given twice`},
		{"a container twice", func(*testing.T) []string { return []string{"--requests", "app=cpu=1", "--requests", "app=memory=1Gi"} },
			`--requests: container "app" given twice`},
		{"limit below request", func(*testing.T) []string { return []string{"--requests", "app=cpu=2", "--limits", "app=cpu=1"} }, "cpu limit 1 is below its request 2"},
		{"both forms", func(*testing.T) []string {
			return []string{"--requests", "app=cpu=1", "--resources", "{app: {limits: {cpu: 2}}}"}
		}, "not both"},
		{"--resources unknown field", func(*testing.T) []string { return []string{"--resources", "{app: {request: {cpu: 1}}}"} }, `--resources: unknown field "app.request"`},
		{"--resources bad quantity", func(*testing.T) []string { return []string{"--resources", "{app: {requests: {cpu: lots}}}"} },
			`--resources: app.requests.cpu: want a quantity`},
		{"--resources another resource", func(*testing.T) []string { return []string{"--resources", "{app: {limits: {nvidia.com/gpu: 1}}}"} },
			`--resources: resources of container "app": limits.nvidia.com/gpu: only cpu and memory change in place`},
		{"--resources claims", func(*testing.T) []string { return []string{"--resources", "{app: {claims: [{name: gpu}]}}"} }, "claims cannot change in place"},
		{"file: bad quantity", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requests: {cpu: lots}}}\n")}
		}, `spec.resources.app.requests.cpu: want a quantity such as "250m", "1" or "64Mi", got "lots"`},
		{"file: unknown field", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requets: {cpu: 1}}}\n")}
		}, `unknown field "spec.resources.app.requets"`},
		{"file: another resource", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  resources: {app: {requests: {hugepages-2Mi: 1Gi}}}\n")}
		}, "requests.hugepages-2Mi: only cpu and memory change in place"},
		{"file: bad flag over it", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base), "--limits", "app=cpu=x"}
		}, `--limits "app=cpu=x": cpu "x" is not a quantity`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args(t)
			if args[0] != "-f" {
				args = append([]string{"--target", "statefulset/web"}, args...)
			}
			_, err := resolveArgs(t, args...)
			if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("resolve %q: %v (exit %d), want bad input with %q", args, err, exitCode(err), tt.want)
			}
		})
	}
}

// TestPlanTakesResources: plan builds the same resources as run, before any request.
func TestPlanTakesResources(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"plan", "--kubeconfig", offlineKubeconfig(t), "--target", "statefulset/web", "--requests", "app=cpu=many"})
	err := cmd.Execute()
	if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), `--requests "app=cpu=many"`) {
		t.Fatalf("plan: %v (exit %d), want bad input naming --requests", err, exitCode(err))
	}
}

// TestFormatResources: the plan and the dry run say resources as the flags take them.
func TestFormatResources(t *testing.T) {
	got := formatResources(map[string]inplace.Resources{
		"side": res(t, "requests memory=64Mi"),
		"app":  res(t, "requests cpu=0.2,memory=64Mi limits cpu=400m"),
	})
	const want = "app requests cpu=200m,memory=64Mi limits cpu=400m; side requests memory=64Mi"
	if got != want {
		t.Errorf("formatResources = %q, want %q", got, want)
	}
}

// TestCompleteResources: --requests and --limits complete a container's resource names after
// CONTAINER=, leaving out those the value names already, and nothing inside a quantity.
func TestCompleteResources(t *testing.T) {
	tests := []struct {
		toComplete string
		want       []string
	}{
		{"app=", []string{"app=cpu=", "app=memory="}},
		{"app=m", []string{"app=memory="}},
		{"app=cpu=200m,", []string{"app=cpu=200m,memory="}},
		{"app=memory=1Gi,c", []string{"app=memory=1Gi,cpu="}},
		{"app=cpu=200m,memory=64Mi,", nil},
		{"app=cpu=2", nil},
	}
	var cf clusterFlags
	for _, tt := range tests {
		got, directive := cf.completeResources(&cobra.Command{}, nil, tt.toComplete)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("complete %q = %q, want %q", tt.toComplete, got, tt.want)
		}
		if tt.want != nil && directive&cobra.ShellCompDirectiveNoSpace == 0 {
			t.Errorf("complete %q: a space would follow %q", tt.toComplete, got)
		}
	}
}
