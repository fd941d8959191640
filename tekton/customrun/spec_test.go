package customrun

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// specs is a SpecGetter over a map of InPlaceRollout documents by name, or an error for all.
type specs struct {
	docs map[string]string
	err  error
}

func (s specs) Get(_ context.Context, namespace, name string) (*v1alpha1.InPlaceRollout, error) {
	if s.err != nil {
		return nil, s.err
	}
	doc, ok := s.docs[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.Group, Resource: "inplacerollouts"}, name)
	}
	r, err := v1alpha1.Decode([]byte(doc))
	if err != nil {
		return nil, specErrorf("%s %s/%s: %v", v1alpha1.Kind, namespace, name, err)
	}
	return r, nil
}

const refDoc = `apiVersion: inplace-rollout.io/v1alpha1
kind: InPlaceRollout
metadata: {name: web}
spec:
  target: {kind: StatefulSet, name: web}
  images: {app: registry.example/app:v2}
  batches: [1, "100%"]
`

// embedded is a run embedding spec (JSON) with params.
func embedded(spec string, params ...v1beta1.Param) *v1beta1.CustomRun {
	run := &v1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pr-rollout", UID: "run-uid"}}
	run.Spec.CustomSpec = &v1beta1.EmbeddedCustomRunSpec{TypeMeta: runtime.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind}}
	if spec != "" {
		run.Spec.CustomSpec.Spec = runtime.RawExtension{Raw: []byte(spec)}
	}
	run.Spec.Params = params
	return run
}

// referenced is a run referencing the InPlaceRollout name, with params.
func referenced(name string, params ...v1beta1.Param) *v1beta1.CustomRun {
	run := &v1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pr-rollout"}}
	run.Spec.CustomRef = &v1beta1.TaskRef{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind, Name: name}
	run.Spec.Params = params
	return run
}

func str(name, v string) v1beta1.Param {
	return v1beta1.Param{Name: name, Value: *v1beta1.NewStructuredValues(v)}
}

func arr(name string, v ...string) v1beta1.Param {
	return v1beta1.Param{Name: name, Value: *v1beta1.NewStructuredValues(v[0], v[1:]...)}
}

const target = `{"target": {"kind": "StatefulSet", "name": "web"}}`

func TestDecodeSpec(t *testing.T) {
	analysisYAML := "prometheus: {address: http://prom:9090}\nchecks: {errorRate: {maxRatio: 0.01}}\n"
	tests := []struct {
		name  string
		run   *v1beta1.CustomRun
		check func(t *testing.T, s rollout.Spec)
	}{
		{"embedded spec with images param", embedded(target, arr("images", "app=registry.example/app:v2", "side=registry.example/side:v2")), func(t *testing.T, s rollout.Spec) {
			if s.Target != (workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}) {
				t.Errorf("target %+v", s.Target)
			}
			if len(s.Images) != 2 || s.Images["side"] != "registry.example/side:v2" {
				t.Errorf("images %v", s.Images)
			}
			if s.Holder != "tekton:ns/pr-rollout" || s.HolderUID != "run-uid" || s.CallerCredentials {
				t.Errorf("holder %q (UID %q), credential files %v: want tekton:ns/pr-rollout (UID run-uid), false", s.Holder, s.HolderUID, s.CallerCredentials)
			}
		}},
		{"images as a string of pairs", embedded(target, str("images", "app=a:2, side=b:2")), func(t *testing.T, s rollout.Spec) {
			if s.Images["app"] != "a:2" || s.Images["side"] != "b:2" {
				t.Errorf("images %v", s.Images)
			}
		}},
		{"referenced object", referenced("web"), func(t *testing.T, s rollout.Spec) {
			if s.Images["app"] != "registry.example/app:v2" || len(s.Batches) != 2 {
				t.Errorf("images %v, batches %v", s.Images, s.Batches)
			}
		}},
		{"params override the referenced object", referenced("web", str("batches", "1,50%,100%"), str("soak", "30s"), str("timeout", "4m"),
			str("max-unavailable", "2"), str("on-inconclusive", "fail"), arr("images", "app=registry.example/app:v3")), func(t *testing.T, s rollout.Spec) {
			if len(s.Batches) != 3 || s.Soak != 30*time.Second || s.Timeout != 4*time.Minute || s.MaxUnavailable != intstr.FromInt32(2) ||
				s.OnInconclusive != "fail" || s.Images["app"] != "registry.example/app:v3" {
				t.Errorf("spec %+v", s)
			}
		}},
		{"params alone", referenced("", str("target", "deployment/api"), arr("images", "app=x:2")), func(t *testing.T, s rollout.Spec) {
			if s.Target.Kind != workload.Deployment || s.Target.Name != "api" {
				t.Errorf("target %+v", s.Target)
			}
		}},
		{"pods by selector", referenced("", str("target", "pods"), str("selector", "app=web"), arr("images", "app=x:2")), func(t *testing.T, s rollout.Spec) {
			if s.Target.Kind != workload.Pods || s.Target.Selector != "app=web" {
				t.Errorf("target %+v", s.Target)
			}
		}},
		{"resources in the embedded spec, no images", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "resources": {"app": {"requests": {"cpu": "200m"}, "limits": {"cpu": "400m"}}}}`),
			func(t *testing.T, s rollout.Spec) {
				r := s.Resources["app"]
				if len(s.Images) != 0 || len(s.Resources) != 1 || r.Requests.Cpu().String() != "200m" || r.Limits.Cpu().String() != "400m" {
					t.Errorf("images %v, resources %v", s.Images, s.Resources)
				}
			}},
		{"resources param over the referenced object", referenced("web", str("resources", "{app: {requests: {memory: 64Mi}}}")), func(t *testing.T, s rollout.Spec) {
			r := s.Resources["app"]
			if s.Images["app"] != "registry.example/app:v2" || len(s.Resources) != 1 || r.Requests.Memory().String() != "64Mi" || len(r.Limits) != 0 {
				t.Errorf("images %v, resources %v", s.Images, s.Resources)
			}
		}},
		{"an empty resources param clears the spec's", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "resources": {"app": {"requests": {"cpu": "1"}}}}`,
			arr("images", "app=x:2"), str("resources", "")), func(t *testing.T, s rollout.Spec) {
			if s.Resources != nil {
				t.Errorf("resources %v, want none", s.Resources)
			}
		}},
		{"hooks param over the embedded spec's", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "images": {"app": "x:2"}, "hooks": {"preUpdate": {"handshake": {"condition": "example.com/a"}}}}`,
			str("hooks", "{postUpdate: {http: {port: 8080, path: /registered}, onFailure: Continue}}")), func(t *testing.T, s rollout.Spec) {
			if s.Hooks == nil || s.Hooks.PreUpdate != nil || s.Hooks.PostUpdate == nil || s.Hooks.PostUpdate.HTTP.Path != "/registered" || s.Hooks.PostUpdate.OnFailure != "Continue" {
				t.Errorf("hooks %+v, want the param's postUpdate alone", s.Hooks)
			}
		}},
		{"an empty hooks param clears the spec's", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "images": {"app": "x:2"}, "hooks": {"preUpdate": {"handshake": {"condition": "example.com/a"}}}}`,
			str("hooks", "")), func(t *testing.T, s rollout.Spec) {
			if s.Hooks != nil {
				t.Errorf("hooks %+v, want none", s.Hooks)
			}
		}},
		{"analysis and prometheus-url", embedded(target, arr("images", "app=x:2"), str("prometheus-url", "http://other:9090"), str("analysis", analysisYAML)), func(t *testing.T, s rollout.Spec) {
			if s.Analysis == nil || s.Analysis.Prometheus.Address != "http://other:9090" {
				t.Errorf("analysis %+v", s.Analysis)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := decodeSpec(context.Background(), tt.run, specs{docs: map[string]string{"web": refDoc}})
			if err != nil {
				t.Fatalf("decodeSpec: %v", err)
			}
			tt.check(t, s)
		})
	}
}

func TestDecodeSpecErrors(t *testing.T) {
	tests := []struct {
		name   string
		run    *v1beta1.CustomRun
		getter specs
		// want are pieces of the error; bad says whether it is bad input (a *specError).
		want []string
		bad  bool
	}{
		{"misspelt field", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "batchs": [1]}`, arr("images", "app=x:2")), specs{}, []string{"taskSpec.spec", "batchs"}, true},
		{"unknown param", embedded(target, arr("images", "app=x:2"), str("image", "x")), specs{}, []string{`unknown param "image"`, "max-unavailable"}, true},
		{"pair without =", embedded(target, arr("images", "x:2")), specs{}, []string{"params[images]", `"x:2"`, "CONTAINER=IMAGE"}, true},
		{"container twice", embedded(target, arr("images", "app=x:2", "app=x:3")), specs{}, []string{"params[images]", `"app" given twice`}, true},
		{"array for a string", embedded(target, arr("images", "app=x:2"), arr("soak", "1s", "2s")), specs{}, []string{"params[soak]", "want a string"}, true},
		{"bad duration", embedded(target, arr("images", "app=x:2"), str("timeout", "ten")), specs{}, []string{"params[timeout]", `"ten"`}, true},
		{"bad batches", embedded(target, arr("images", "app=x:2"), str("batches", "50%,10%")), specs{}, []string{"params[batches]"}, true},
		{"prometheus-url without analysis", embedded(target, arr("images", "app=x:2"), str("prometheus-url", "http://p:9090")), specs{}, []string{"params[prometheus-url]", "no analysis"}, true},
		{"prometheus-url with a password", embedded(target, arr("images", "app=x:2"), str("analysis", "checks: {errorRate: {maxRatio: 0.01}}"), str("prometheus-url", "http://u:secret@p:9090")), specs{}, []string{"params[prometheus-url]", "user name or password"}, true},
		{"inline password", embedded(target, arr("images", "app=x:2"), str("analysis", "prometheus: {address: 'http://p:9090', basicAuth: {username: u, password: hunter2}}\nchecks: {errorRate: {maxRatio: 0.01}}")), specs{}, []string{"basicAuth.password", "Secret"}, true},
		{"credential file", embedded(target, arr("images", "app=x:2"), str("analysis", "prometheus: {address: 'http://p:9090', bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}\nchecks: {errorRate: {maxRatio: 0.01}}")), specs{}, []string{"bearerTokenFile"}, true},
		{"hold point", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "upTo": 1}`, arr("images", "app=x:2")), specs{}, []string{"spec.upTo"}, true},
		{"no images", embedded(target), specs{}, []string{"nothing to change", "images param", "resources param"}, true},
		{"resources param not a map", embedded(target, str("resources", "[app]")), specs{}, []string{"params[resources]"}, true},
		{"resources param bad quantity", embedded(target, str("resources", "{app: {limits: {cpu: lots}}}")), specs{}, []string{"params[resources]", "app.limits.cpu", "want a quantity"}, true},
		{"resources param unknown field", embedded(target, str("resources", "{app: {limit: {cpu: 1}}}")), specs{}, []string{"params[resources]", `unknown field "app.limit"`}, true},
		{"resources param array", embedded(target, arr("resources", "app", "x")), specs{}, []string{"params[resources]", "want a string"}, true},
		{"hooks param unknown field", embedded(target, arr("images", "app=x:2"), str("hooks", "{preUpdate: {exec: {command: [sh]}}}")), specs{}, []string{"params[hooks]", `unknown field "preUpdate.exec"`}, true},
		{"hooks param path without /", embedded(target, arr("images", "app=x:2"), str("hooks", "{preUpdate: {http: {port: 80, path: leave}}}")), specs{}, []string{`http.path "leave" does not start with /`}, true},
		{"resources of another resource", embedded(target, str("resources", "{app: {requests: {ephemeral-storage: 1Gi}}}")), specs{}, []string{"requests.ephemeral-storage: only cpu and memory change in place"}, true},
		{"resources in the spec misspelt", embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "resources": {"app": {"requets": {"cpu": "1"}}}}`), specs{}, []string{"taskSpec.spec", `unknown field "resources.app.requets"`}, true},
		{"referenced object missing", referenced("gone"), specs{docs: map[string]string{}}, []string{"taskRef.name", "ns/gone not found"}, true},
		{"referenced object misspelt", referenced("web"), specs{docs: map[string]string{"web": strings.Replace(refDoc, "batches", "batchez", 1)}}, []string{"InPlaceRollout ns/web", "batchez"}, true},
		{"API trouble reading the object", referenced("web"), specs{err: errors.New("connection refused")}, []string{"reading InPlaceRollout ns/web", "connection refused"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeSpec(context.Background(), tt.run, tt.getter)
			if err == nil {
				t.Fatal("decodeSpec: no error")
			}
			var bad *specError
			if errors.As(err, &bad) != tt.bad {
				t.Errorf("error %v: bad input %v, want %v", err, !tt.bad, tt.bad)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "secret@") {
				t.Errorf("error %q shows a credential", err)
			}
		})
	}
}
