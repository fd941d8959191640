package argospec

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

func testRollout(stable string) *argov1alpha1.Rollout {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	ro.Status.StableRS = stable
	ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "reg/app:v2"}, {Name: "side", Image: "reg/side:v2"}}
	ro.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "reg/init:v2"}}
	return ro
}

// withNativeSidecar adds the native sidecar mesh (an init container with restartPolicy Always)
// to the Rollout's template.
func withNativeSidecar(ro *argov1alpha1.Rollout) *argov1alpha1.Rollout {
	always := corev1.ContainerRestartPolicyAlways
	ro.Spec.Template.Spec.InitContainers = append(ro.Spec.Template.Spec.InitContainers, corev1.Container{Name: "mesh", Image: "reg/mesh:v2", RestartPolicy: &always})
	return ro
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		ro      *argov1alpha1.Rollout
		config  string
		want    map[string]string // the spec's images, when no error
		keep    map[string]string // the spec's Keep, when no error
		wantErr string
	}{
		{name: "images", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"},"images":{"app":"reg/app:v3"}}`,
			want: map[string]string{"app": "reg/app:v3"}},
		{name: "fromRollout takes every container and keeps the init container", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`,
			want: map[string]string{"app": "reg/app:v2", "side": "reg/side:v2"}, keep: map[string]string{"init": "reg/init:v2"}},
		{name: "fromRollout with includeInit", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"includeInit":true}`,
			want: map[string]string{"app": "reg/app:v2", "side": "reg/side:v2", "init": "reg/init:v2"}},
		{name: "fromRollout takes a native sidecar without includeInit", ro: withNativeSidecar(testRollout("abc")), config: `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`,
			want: map[string]string{"app": "reg/app:v2", "side": "reg/side:v2", "mesh": "reg/mesh:v2"}, keep: map[string]string{"init": "reg/init:v2"}},
		{name: "fromRollout with includeInit and a native sidecar", ro: withNativeSidecar(testRollout("abc")), config: `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"includeInit":true}`,
			want: map[string]string{"app": "reg/app:v2", "side": "reg/side:v2", "init": "reg/init:v2", "mesh": "reg/mesh:v2"}},
		{name: "YAML is read too", ro: testRollout("abc"), config: "target: {kind: DaemonSet, name: agent}\nimages: {app: reg/app:v3}\n",
			want: map[string]string{"app": "reg/app:v3"}},
		{name: "both images and fromRollout", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"images":{"app":"x:1"}}`,
			wantErr: "steps[].plugin.config of Rollout ns/web: images and fromRollout both given"},
		{name: "no Rollout", ro: nil, config: `{}`, wantErr: "the call carries no Rollout"},
		{name: "nil config, as gob delivers an empty one", ro: testRollout("abc"), config: "", wantErr: "steps[].plugin.config of Rollout ns/web is empty"},
		{name: "null config", ro: testRollout("abc"), config: "null", wantErr: "is empty"},
		{name: "unknown field named", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"},"image":{"app":"x:1"}}`,
			wantErr: `unknown field "image"`},
		{name: "bad kind named", ro: testRollout("abc"), config: `{"target":{"kind":"Job","name":"db"},"images":{"app":"x:1"}}`,
			wantErr: "spec.target.kind"},
		{name: "no images", ro: testRollout("abc"), config: `{"target":{"kind":"StatefulSet","name":"db"}}`, wantErr: "steps[].plugin.config of Rollout ns/web: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			if tt.config != "" {
				raw = json.RawMessage(tt.config)
			}
			req, err := Decode(tt.ro, raw, "steps[].plugin.config")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !maps.Equal(req.Spec.Images, tt.want) {
				t.Errorf("images %v, want %v", req.Spec.Images, tt.want)
			}
			if !maps.Equal(req.Spec.Keep, tt.keep) {
				t.Errorf("keep %v, want %v", req.Spec.Keep, tt.keep)
			}
			if req.Holder != "argo:ns/web" || req.Spec.Holder != "argo:ns/web" || req.Spec.Target.Namespace != "ns" {
				t.Errorf("holder %q, spec holder %q, target %v: want argo:ns/web in namespace ns", req.Holder, req.Spec.Holder, req.Spec.Target)
			}
			if req.Initial {
				t.Error("a Rollout with a stable revision is not its first creation")
			}
		})
	}
}

func TestDecodeInitialRevision(t *testing.T) {
	req, err := Decode(testRollout(""), json.RawMessage(`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`), "f")
	if err != nil {
		t.Fatal(err)
	}
	if !req.Initial {
		t.Error("a Rollout with no stableRS is its first creation: want Initial")
	}
}

func TestCanonicalTellsConfigsApart(t *testing.T) {
	a, err := Decode(testRollout("abc"), json.RawMessage(`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`), "f")
	if err != nil {
		t.Fatal(err)
	}
	ro := testRollout("abc")
	ro.Spec.Template.Spec.Containers[0].Image = "reg/app:v3"
	b, err := Decode(ro, json.RawMessage(`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`), "f")
	if err != nil {
		t.Fatal(err)
	}
	if a.Canonical == b.Canonical {
		t.Errorf("a new image in the Rollout's template gives the same canonical config %s", a.Canonical)
	}
	ro = testRollout("abc")
	ro.Spec.Template.Spec.InitContainers[0].Image = "reg/init:v3"
	c, err := Decode(ro, json.RawMessage(`{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`), "f")
	if err != nil {
		t.Fatal(err)
	}
	if a.Canonical == c.Canonical || a.Spec.Hash() == c.Spec.Hash() {
		t.Errorf("a new image of an init container left alone gives the same canonical config %s or spec hash %s: the plugin would report the last rollout's end for it", a.Canonical, a.Spec.Hash())
	}
}

// A Rollout is readable by everyone who may read Rollouts, so a credential written in its config
// is refused, by the path of its field and the Secret field to use instead, without the value.
func TestDecodeRefusesInlineCredentials(t *testing.T) {
	const secret = "hunter2-inline"
	tests := []struct {
		name       string
		prometheus string
		want       []string
	}{
		{"basicAuth password", `{"address":"http://prom:9090","basicAuth":{"username":"u","password":"` + secret + `"}}`,
			[]string{"analysis.prometheus.basicAuth.password", "passwordSecret", "namespace ns"}},
		{"bearer token, a field there is none of", `{"address":"http://prom:9090","bearerToken":"` + secret + `"}`,
			[]string{`unknown field "analysis.prometheus.bearerToken"`, "bearerTokenSecret"}},
		{"bearer token in an Authorization header", `{"address":"http://prom:9090","headers":{"Authorization":"Bearer ` + secret + `"}}`,
			[]string{"prometheus.headers.Authorization", "bearerTokenSecret"}},
		{"password in the address", `{"address":"http://u:` + secret + `@prom:9090"}`,
			[]string{"user name or password", "basicAuth"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, field := range []string{"steps[].plugin.config", `trafficRouting.plugins["inplace-rollout/traffic"]`} {
				config := `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true,"analysis":{"prometheus":` + tt.prometheus + `}}`
				_, err := Decode(testRollout("abc"), json.RawMessage(config), field)
				if err == nil {
					t.Fatalf("%s: Decode accepted a credential written in the config", field)
				}
				for _, w := range append([]string{field + " of Rollout ns/web"}, tt.want...) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", field, err, w)
					}
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("%s: error shows the credential: %q", field, err)
				}
			}
		})
	}
}

// withResources gives the Rollout template's container name the requests and limits of r
// ("cpu=200m,memory=64Mi", "" for none), a container or, failing that, an init container.
func withResources(t *testing.T, ro *argov1alpha1.Rollout, name, requests, limits string) *argov1alpha1.Rollout {
	t.Helper()
	list := func(s string) corev1.ResourceList {
		if s == "" {
			return nil
		}
		l := corev1.ResourceList{}
		for _, kv := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	for _, cs := range [][]corev1.Container{ro.Spec.Template.Spec.Containers, ro.Spec.Template.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				cs[i].Resources = corev1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}
				return ro
			}
		}
	}
	t.Fatalf("the Rollout has no container %q", name)
	return nil
}

// TestDecodeResources: resources in the config pass through; fromRollout takes the cpu and
// memory each container and native sidecar of the Rollout's template declares, and nothing
// else.
func TestDecodeResources(t *testing.T) {
	const target = `"target":{"kind":"StatefulSet","name":"db"}`
	tests := []struct {
		name    string
		ro      func(t *testing.T) *argov1alpha1.Rollout
		config  string
		want    map[string]string // container: "requests cpu=200m limits cpu=400m", when no error
		wantErr string
	}{
		{name: "resources alone", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config: `{` + target + `,"resources":{"app":{"requests":{"cpu":"200m"},"limits":{"cpu":"400m"}}}}`,
			want:   map[string]string{"app": "requests cpu=200m limits cpu=400m"}},
		{name: "resources beside images", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config: "target: {kind: StatefulSet, name: db}\nimages: {app: reg/app:v3}\nresources: {app: {limits: {memory: 1Gi}}}\n",
			want:   map[string]string{"app": "limits memory=1Gi"}},
		{name: "fromRollout takes cpu and memory of containers and native sidecars", ro: func(t *testing.T) *argov1alpha1.Rollout {
			ro := withNativeSidecar(testRollout("abc"))
			withResources(t, ro, "app", "cpu=200m,memory=64Mi,ephemeral-storage=1Gi", "cpu=400m,nvidia.com/gpu=1")
			withResources(t, ro, "mesh", "cpu=50m", "")
			return withResources(t, ro, "init", "cpu=1", "cpu=1")
		}, config: `{` + target + `,"fromRollout":true}`,
			want: map[string]string{"app": "requests cpu=200m,memory=64Mi limits cpu=400m", "mesh": "requests cpu=50m"}},
		{name: "fromRollout with no resources declared takes none", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config: `{` + target + `,"fromRollout":true}`, want: map[string]string{}},
		{name: "fromRollout with only other resources takes none", ro: func(t *testing.T) *argov1alpha1.Rollout {
			return withResources(t, testRollout("abc"), "app", "ephemeral-storage=1Gi", "")
		}, config: `{` + target + `,"fromRollout":true}`, want: map[string]string{}},
		{name: "both resources and fromRollout", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config:  `{` + target + `,"fromRollout":true,"resources":{"app":{"requests":{"cpu":"1"}}}}`,
			wantErr: "steps[].plugin.config of Rollout ns/web: resources and fromRollout both given"},
		{name: "a bad quantity named by its path", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config:  `{` + target + `,"resources":{"app":{"requests":{"cpu":"lots"}}}}`,
			wantErr: `steps[].plugin.config of Rollout ns/web: resources.app.requests.cpu: want a quantity`},
		{name: "another resource refused", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config:  `{` + target + `,"resources":{"app":{"limits":{"nvidia.com/gpu":"1"}}}}`,
			wantErr: `resources of container "app": limits.nvidia.com/gpu: only cpu and memory change in place`},
		{name: "an unknown field named by its path", ro: func(*testing.T) *argov1alpha1.Rollout { return testRollout("abc") },
			config:  `{` + target + `,"resources":{"app":{"request":{"cpu":"1"}}}}`,
			wantErr: `unknown field "resources.app.request"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Decode(tt.ro(t), json.RawMessage(tt.config), "steps[].plugin.config")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got := map[string]string{}
			for name, r := range req.Spec.Resources {
				got[name] = inplace.DescribeResources(r)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("resources %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCanonicalTellsResourcesApart: new cpu or memory in the Rollout's template is another
// config and another rollout, and the same values given another way are the same config.
func TestCanonicalTellsResourcesApart(t *testing.T) {
	const config = `{"target":{"kind":"StatefulSet","name":"db"},"fromRollout":true}`
	decode := func(ro *argov1alpha1.Rollout) Request {
		t.Helper()
		r, err := Decode(ro, json.RawMessage(config), "f")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := decode(withResources(t, testRollout("abc"), "app", "cpu=200m", "cpu=400m"))
	b := decode(withResources(t, testRollout("abc"), "app", "cpu=300m", "cpu=400m"))
	if a.Canonical == b.Canonical || a.Spec.Hash() == b.Spec.Hash() {
		t.Errorf("new cpu in the Rollout's template gives the same canonical config %s or spec hash %s", a.Canonical, a.Spec.Hash())
	}
	c := decode(withResources(t, testRollout("abc"), "app", "cpu=0.2", "cpu=0.4"))
	if a.Spec.Hash() != c.Spec.Hash() {
		t.Errorf("cpu 0.2 and 200m hash apart: %s, %s", a.Spec.Hash(), c.Spec.Hash())
	}
	if a.Canonical != decode(withResources(t, testRollout("abc"), "app", "cpu=200m", "cpu=400m")).Canonical {
		t.Error("the same Rollout gives two canonical configs: the plugin would supersede its own rollout")
	}
}
