package rollout

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/specfile")

// TestSpecFileGolden decodes each document of testdata/specfile, defaults it and converts it to
// a Spec, and compares the outcome with its golden file: the defaulted document and the Spec,
// or the error that names the mistake. `go test ./pkg/rollout -run SpecFileGolden -update`
// rewrites them.
func TestSpecFileGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/specfile/*.[jy]*")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs in testdata/specfile: %v", err)
	}
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden") {
			continue
		}
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := specFileOutcome(data)
			golden := strings.TrimSuffix(in, filepath.Ext(in)) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s:\n--- got\n%s\n--- want (%s)\n%s", in, got, golden, want)
			}
			if strings.HasPrefix(filepath.Base(in), "error-") != strings.HasPrefix(got, "error: ") {
				t.Errorf("%s: an input named error-* must fail, and only those: got\n%s", in, got)
			}
		})
	}
}

// specFileOutcome is what the golden files hold.
func specFileOutcome(data []byte) string {
	doc, err := v1alpha1.Decode(data)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	spec, err := FromV1alpha1(&doc.Spec, Caller{Namespace: "shop", Holder: "argo:shop/web"})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	v1alpha1.SetDefaults(&doc.Spec)
	defaulted, err := yaml.Marshal(doc)
	if err != nil {
		return "error: marshalling: " + err.Error() + "\n"
	}
	return fmt.Sprintf("# defaulted\n%s# converted\ntarget: %s\nimages: %s\nbatches: %s\nupTo: %s\nmaxUnavailable: %s\ngracePeriod: %s\nsoak: %s\ntimeout: %s\nallowUnready: %v\nanalysis: %v\nonInconclusive: %s\nhooks:%s\n",
		defaulted, spec.Target, mustJSON(spec.Images), formatBatches(spec.Batches), upToString(spec.UpTo), spec.MaxUnavailable.String(), spec.GracePeriod, spec.Soak, spec.Timeout,
		spec.AllowUnready, spec.Analysis != nil, spec.OnInconclusive, hooksString(spec.Hooks))
}

func hooksString(h *inplace.Hooks) string {
	lines := inplace.DescribeHooks(h)
	if len(lines) == 0 {
		return " none"
	}
	return "\n- " + strings.Join(lines, "\n- ")
}

func upToString(v *intstr.IntOrString) string {
	if v == nil {
		return "every pod"
	}
	return v.String()
}

// TestFromV1alpha1LeavesItsInputAlone: converting defaults a copy, not the caller's spec.
func TestFromV1alpha1LeavesItsInputAlone(t *testing.T) {
	in := &v1alpha1.InPlaceRolloutSpec{Target: v1alpha1.Target{Kind: "statefulset", Name: "web"}, Images: map[string]string{"app": "reg/app:v2"}}
	if _, err := FromV1alpha1(in, Caller{Namespace: "shop", Holder: "cli"}); err != nil {
		t.Fatal(err)
	}
	if in.Batches != nil || in.MaxUnavailable != nil || in.Timeout != nil || in.OnInconclusive != "" {
		t.Errorf("the input was defaulted in place: %+v", in)
	}
}

// hooksSpec decodes a spec of a StatefulSet's image with hooks (YAML), as a document's spec.
func hooksSpec(t *testing.T, hooks string) *v1alpha1.InPlaceRolloutSpec {
	t.Helper()
	s, err := v1alpha1.DecodeSpec([]byte("{target: {kind: StatefulSet, name: web}, images: {app: reg/app:v2}, hooks: " + hooks + "}"))
	if err != nil {
		t.Fatalf("decoding hooks %s: %v", hooks, err)
	}
	return s
}

// TestFromV1alpha1Hooks: a document's hooks reach the Spec as the engine's, every field of
// each kind of hook carried over; no hooks field, or one that names no hook, is none.
func TestFromV1alpha1Hooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks string
		want  *inplace.Hooks
	}{
		{"none", "null", nil},
		{"an empty field", "{}", nil},
		{"an HTTP call by port number", "{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST, expectStatus: 204}, timeout: 15s, onFailure: Continue}}",
			&inplace.Hooks{PreUpdate: &inplace.Hook{
				HTTP:    &inplace.HTTPHook{Port: intstr.FromInt32(8080), Path: "/hook/pre", Method: "POST", ExpectStatus: 204},
				Timeout: 15 * time.Second, OnFailure: inplace.HookContinue}}},
		{"an HTTP call by port name, defaults left to the engine", "{postUpdate: {http: {port: http, path: /ready}}}",
			&inplace.Hooks{PostUpdate: &inplace.Hook{HTTP: &inplace.HTTPHook{Port: intstr.FromString("http"), Path: "/ready"}}}},
		{"a handshake each way", "{preUpdate: {handshake: {condition: example.com/deregistered}, timeout: 5m, onFailure: Fail}, postUpdate: {handshake: {condition: example.com/registered}}}",
			&inplace.Hooks{
				PreUpdate:  &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/deregistered"}, Timeout: 5 * time.Minute, OnFailure: inplace.HookFail},
				PostUpdate: &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/registered"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := FromV1alpha1(hooksSpec(t, tt.hooks), Caller{Namespace: "shop", Holder: "cli"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(spec.Hooks, tt.want) {
				t.Errorf("hooks %s converted to %s, want %s", tt.hooks, mustJSON(spec.Hooks), mustJSON(tt.want))
			}
		})
	}
}

// TestFromV1alpha1RefusesBadHooks: hooks no pod could run are bad input, the message naming
// the field by its path in the document.
func TestFromV1alpha1RefusesBadHooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks string
		want  string
	}{
		{"both http and handshake", "{preUpdate: {http: {port: 8080, path: /h}, handshake: {condition: example.com/x}}}",
			"spec.hooks.preUpdate: takes exactly one of http and handshake"},
		{"neither", "{postUpdate: {timeout: 10s}}", "spec.hooks.postUpdate: takes exactly one of http and handshake"},
		{"a port out of range", "{preUpdate: {http: {port: 70000, path: /h}}}", "spec.hooks.preUpdate: http.port 70000 is not between 1 and 65535"},
		{"a port number as a string", `{preUpdate: {http: {port: "8080", path: /h}}}`, `spec.hooks.preUpdate: http.port "8080" is neither a number nor a port name`},
		{"a path without /", "{preUpdate: {http: {port: 8080, path: hook}}}", `spec.hooks.preUpdate: http.path "hook" does not start with /`},
		{"a path with a query", `{preUpdate: {http: {port: 8080, path: "/hook?x=1"}}}`, "spec.hooks.preUpdate: http.path \"/hook?x=1\" has a query or fragment"},
		{"another method", "{postUpdate: {http: {port: 8080, path: /h, method: PUT}}}", `spec.hooks.postUpdate: http.method "PUT" is neither GET nor POST`},
		{"an unknown onFailure", "{preUpdate: {handshake: {condition: example.com/x}, onFailure: Ignore}}",
			`spec.hooks.preUpdate: onFailure "Ignore" is neither Fail nor Continue`},
		{"a negative timeout", "{preUpdate: {handshake: {condition: example.com/x}, timeout: -5s}}", "spec.hooks.preUpdate: timeout -5s is below 0"},
		{"a handshake on Ready", "{postUpdate: {handshake: {condition: Ready}}}",
			`spec.hooks.postUpdate: handshake.condition "Ready" is written by Kubernetes or by the rollout itself`},
		{"a handshake on the rollout's gate", "{preUpdate: {handshake: {condition: inplace-rollout.io/ready}}}",
			`spec.hooks.preUpdate: handshake.condition "inplace-rollout.io/ready" is written by Kubernetes or by the rollout itself`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromV1alpha1(hooksSpec(t, tt.hooks), Caller{Namespace: "shop", Holder: "cli"})
			var ie *InvalidError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("hooks %s: %v (%T), want bad input saying %q", tt.hooks, err, err, tt.want)
			}
		})
	}
}

// TestDecodeRefusesBadHookFields: a hook field of the wrong type or unknown is refused by the
// strict decoding, named by its path.
func TestDecodeRefusesBadHookFields(t *testing.T) {
	tests := []struct{ hooks, want string }{
		{"{preUpdate: {http: {port: true, path: /h}}}", "hooks.preUpdate.http.port: want a port number such as 8080 or the name of a declared port"},
		{"{preUpdate: {http: {port: 8080, path: /h}, timeout: soon}}", `hooks.preUpdate.timeout: want a duration such as "30s"`},
		{"{postUpdate: {exec: {command: [x]}}}", `unknown field "hooks.postUpdate.exec"`},
		{"{preUpdate: {handshake: {conditon: example.com/x}}}", `unknown field "hooks.preUpdate.handshake.conditon"`},
	}
	for _, tt := range tests {
		_, err := v1alpha1.DecodeSpec([]byte("{target: {kind: StatefulSet, name: web}, images: {app: reg/app:v2}, hooks: " + tt.hooks + "}"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("hooks %s: %v, want an error saying %q", tt.hooks, err, tt.want)
		}
	}
}
