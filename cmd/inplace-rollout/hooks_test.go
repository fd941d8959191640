package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// preHTTPText is a preUpdate POST to :8080/hook/pre as --hooks takes it, and preHTTP the hooks
// it gives.
const preHTTPText = "{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST}, timeout: 10s}}"

var preHTTP = &inplace.Hooks{PreUpdate: &inplace.Hook{
	HTTP: &inplace.HTTPHook{Port: intstr.FromInt32(8080), Path: "/hook/pre", Method: "POST"}, Timeout: 10 * time.Second}}

// TestRunTakesHooks: --hooks takes the spec's hooks field as YAML or JSON, an empty one is none,
// and -f's hooks are the file's unless --hooks gives others in their place.
func TestRunTakesHooks(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n"
	postHandshake := &inplace.Hooks{PostUpdate: &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/registered"}, OnFailure: inplace.HookContinue}}
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want *inplace.Hooks
	}{
		{"YAML", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--image", "app=reg/app:v2", "--hooks", preHTTPText}
		}, preHTTP},
		{"JSON", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--image", "app=reg/app:v2", "--hooks",
				`{"postUpdate": {"handshake": {"condition": "example.com/registered"}, "onFailure": "Continue"}}`}
		}, postHandshake},
		{"empty is none", func(*testing.T) []string {
			return []string{"--target", "statefulset/web", "--image", "app=reg/app:v2", "--hooks", ""}
		}, nil},
		{"from the file", func(t *testing.T) []string { return []string{"-f", specFile(t, "", base+"  hooks: "+preHTTPText+"\n")} }, preHTTP},
		{"--hooks in place of the file's", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  hooks: "+preHTTPText+"\n"), "--hooks", "{postUpdate: {handshake: {condition: example.com/registered}, onFailure: Continue}}"}
		}, postHandshake},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := resolveArgs(t, tt.args(t)...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(spec.Hooks, tt.want) {
				t.Errorf("hooks %+v, want %+v", spec.Hooks, tt.want)
			}
		})
	}
}

// TestRunRefusesBadHooks: hooks no pod could run are bad input before any request, naming
// --hooks and the hook's field, or for -f the field by its path in the file.
func TestRunRefusesBadHooks(t *testing.T) {
	const base = "  target: {kind: StatefulSet, name: web}\n  images: {app: reg/app:v2}\n"
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"both http and handshake", func(*testing.T) []string {
			return []string{"--hooks", "{preUpdate: {http: {port: 8080, path: /h}, handshake: {condition: example.com/x}}}"}
		}, "--hooks: hooks.preUpdate: takes exactly one of http and handshake"},
		{"neither", func(*testing.T) []string { return []string{"--hooks", "{postUpdate: {onFailure: Continue}}"} },
			"--hooks: hooks.postUpdate: takes exactly one of http and handshake"},
		{"a port out of range", func(*testing.T) []string { return []string{"--hooks", "{preUpdate: {http: {port: 0, path: /h}}}"} },
			"--hooks: hooks.preUpdate: http.port 0 is not between 1 and 65535"},
		{"a port of the wrong type", func(*testing.T) []string { return []string{"--hooks", "{preUpdate: {http: {port: [8080], path: /h}}}"} },
			"--hooks: preUpdate.http.port: want a port number such as 8080 or the name of a declared port"},
		{"a path without /", func(*testing.T) []string { return []string{"--hooks", "{preUpdate: {http: {port: 8080, path: hook}}}"} },
			`--hooks: hooks.preUpdate: http.path "hook" does not start with /`},
		{"an unknown onFailure", func(*testing.T) []string {
			return []string{"--hooks", "{preUpdate: {handshake: {condition: example.com/x}, onFailure: Retry}}"}
		}, `--hooks: hooks.preUpdate: onFailure "Retry" is neither Fail nor Continue`},
		{"a negative timeout", func(*testing.T) []string {
			return []string{"--hooks", "{preUpdate: {handshake: {condition: example.com/x}, timeout: -1m}}"}
		}, "--hooks: hooks.preUpdate: timeout -1m0s is below 0"},
		{"a handshake on Ready", func(*testing.T) []string { return []string{"--hooks", "{postUpdate: {handshake: {condition: Ready}}}"} },
			`--hooks: hooks.postUpdate: handshake.condition "Ready" is written by Kubernetes or by the rollout itself`},
		{"an unknown field", func(*testing.T) []string { return []string{"--hooks", "{preUpdate: {exec: {command: [x]}}}"} },
			`--hooks: unknown field "preUpdate.exec"`},
		{"not YAML", func(*testing.T) []string { return []string{"--hooks", "{preUpdate: [}"} }, "--hooks: "},
		{"file: a path without /", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base+"  hooks: {preUpdate: {http: {port: 8080, path: hook}}}\n")}
		}, `spec.hooks.preUpdate: http.path "hook" does not start with /`},
		{"file: a bad --hooks over it", func(t *testing.T) []string {
			return []string{"-f", specFile(t, "", base), "--hooks", "{postUpdate: {handshake: {condition: Ready}}}"}
		}, `--hooks: hooks.postUpdate: handshake.condition "Ready"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args(t)
			if args[0] != "-f" {
				args = append([]string{"--target", "statefulset/web", "--image", "app=reg/app:v2"}, args...)
			}
			_, err := resolveArgs(t, args...)
			if err == nil || exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("resolve %q: %v (exit %d), want bad input with %q", args, err, exitCode(err), tt.want)
			}
		})
	}
}

// TestPlanPrintsHooks: plan takes --hooks, lists each hook in one line (in JSON too), and
// refuses, as bad input, a hook naming a port the template does not declare.
func TestPlanPrintsHooks(t *testing.T) {
	kubeconfig := observedWeb(t)
	args := []string{"plan", "--kubeconfig", kubeconfig, "--target", "statefulset/web", "--image", "app=reg/app:v2", "--pin-digests", "never",
		"--hooks", "{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST}}, postUpdate: {handshake: {condition: example.com/registered}, onFailure: Continue}}"}
	hooks := []string{
		"preUpdate: POST :8080/hook/pre (timeout 10s, onFailure Fail)",
		"postUpdate: handshake on condition example.com/registered (timeout 5m0s, onFailure Continue)",
	}
	out, stderr, err := runRoot(t, args...)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	want := append(append([]string{"StatefulSet shop/web: app=reg/app:v1 -> app=reg/app:v2"}, hooks...), "batch 1 (up to 2 pods): [web-1 web-0]")
	if got := words(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	out, _, err = runRoot(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var p planReport
	if err := json.Unmarshal([]byte(out), &p); err != nil || !reflect.DeepEqual(p.Hooks, hooks) {
		t.Errorf("JSON %s (%v), want hooks %q", out, err, hooks)
	}
	_, _, err = runRoot(t, "plan", "--kubeconfig", kubeconfig, "--target", "statefulset/web", "--image", "app=reg/app:v2", "--pin-digests", "never",
		"--hooks", "{preUpdate: {http: {port: admin, path: /hook/pre}}}")
	if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), `StatefulSet shop/web (its pod template): hooks.preUpdate: no container declares the port "admin"`) {
		t.Errorf("plan of a port the template does not declare: %v (exit %d), want bad input naming the port", err, exitCode(err))
	}
}

// TestDryRunPrintsHooks: the server dry run's report lists each hook in one line after what
// the rollout changes.
func TestDryRunPrintsHooks(t *testing.T) {
	var out bytes.Buffer
	printDryRun(&out, dryRunDocument{Target: "StatefulSet shop/web", Accepted: true, Hooks: inplace.DescribeHooks(preHTTP),
		DryRunReport: rollout.DryRunReport{Images: map[string]string{"app": "reg/app:v2"}}})
	want := []string{
		"StatefulSet shop/web: dry run of the start, images app=reg/app:v2 (nothing was changed)",
		"preUpdate: POST :8080/hook/pre (timeout 10s, onFailure Fail)",
	}
	if got := words(out.String()); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}
