package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTemplatePatch(t *testing.T) {
	tmpl := webTemplate("docker.io/library/nginx:1.26")
	tests := []struct {
		name   string
		images map[string]string
		want   string
	}{
		{"nothing to change", nil, `{"spec":{}}`},
		{"same image spelled differently", map[string]string{"app": "nginx:1.26"}, `{"spec":{}}`},
		{"one container", map[string]string{"app": "nginx:1.27"}, `{"spec":{"containers":[{"image":"nginx:1.27","name":"app"}]}}`},
		{"init and containers", map[string]string{"init": "reg/init:v2", "sidecar": "reg/side:v2", "app": "nginx:1.27"},
			`{"spec":{"containers":[{"image":"nginx:1.27","name":"app"},{"image":"reg/side:v2","name":"sidecar"}],"initContainers":[{"image":"reg/init:v2","name":"init"}]}}`},
		{"unknown container left out", map[string]string{"db": "reg/db:v2"}, `{"spec":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := json.Marshal(templatePatch(&tmpl, Images(tt.images)))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tt.want {
				t.Errorf("templatePatch = %s\nwant %s", data, tt.want)
			}
		})
	}
}

func TestObjectPatchBytes(t *testing.T) {
	lock := (&testLock{Holder: "cli", Phase: "Progressing"}).encode()
	tests := []struct {
		name  string
		patch objectPatch
		want  string
	}{
		{"resourceVersion only", objectPatch{resourceVersion: "7"}, `{"metadata":{"resourceVersion":"7"}}`},
		{"lock", objectPatch{resourceVersion: "7", lock: lock},
			`{"metadata":{"annotations":{"inplace-rollout.io/rollout":` + jsonString(lock) + `},"resourceVersion":"7"}}`},
		{"spec", objectPatch{resourceVersion: "8", spec: map[string]any{"paused": true}}, `{"metadata":{"resourceVersion":"8"},"spec":{"paused":true}}`},
		{"empty spec left out", objectPatch{resourceVersion: "8", spec: map[string]any{}}, `{"metadata":{"resourceVersion":"8"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.patch.bytes()); got != tt.want {
				t.Errorf("bytes() = %s\nwant %s", got, tt.want)
			}
		})
	}
}

func jsonString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

func TestTemplateImages(t *testing.T) {
	tmpl := webTemplate("reg/app:v1")
	tests := []struct {
		name  string
		names map[string]string
		want  map[string]string
	}{
		{"none", nil, map[string]string{}},
		{"containers and init", map[string]string{"app": "x", "init": "y"}, map[string]string{"app": "reg/app:v1", "init": "reg/init:v1"}},
		{"unknown left out", map[string]string{"sidecar": "x", "db": "y"}, map[string]string{"sidecar": "reg/side:v1"}},
	}
	for _, tt := range tests {
		if got := TemplateImages(&tmpl, tt.names); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: TemplateImages = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestForeign(t *testing.T) {
	lock := &testLock{Images: map[string]string{"app": "reg/app:v2"}, PreviousImages: map[string]string{"app": "reg/app:v1"}}
	sts := func(app string) Workload {
		tmpl := webTemplate(app)
		return &statefulSet{onDelete: &onDelete{ref: Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, template: &tmpl}}
	}
	ds := func(app string) Workload {
		return &daemonSet{ds: &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: webTemplate(app)}}}
	}
	dep := func(app string) Workload {
		return &deployment{dep: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: webTemplate(app)}}, lock: lock.lock()}
	}
	tests := []struct {
		name string
		w    Workload
		lock *testLock
		want map[string]string
	}{
		{"no lock", sts("reg/app:v9"), nil, nil},
		{"pods have no template", &podSet{}, lock, nil},
		{"statefulset at the target", sts("reg/app:v2"), lock, nil},
		{"statefulset back at the previous images", sts("reg/app:v1"), lock, map[string]string{"app": "reg/app:v1"}},
		{"statefulset changed by someone", sts("reg/app:v3"), lock, map[string]string{"app": "reg/app:v3"}},
		{"daemonset changed by someone", ds("reg/app:v3"), lock, map[string]string{"app": "reg/app:v3"}},
		{"daemonset at the target", ds("reg/app:v2"), lock, nil},
		{"deployment at the previous images", dep("reg/app:v1"), lock, nil},
		{"deployment at the target", dep("reg/app:v2"), lock, nil},
		{"deployment changed by someone", dep("reg/app:v3"), lock, map[string]string{"app": "reg/app:v3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var images map[string]string
			if tt.lock != nil {
				images = tt.lock.Images
			}
			foreign := Foreign(tt.w, Images(images))
			var got map[string]string
			if foreign != nil {
				got = foreign.Images
			}
			if (foreign == nil) != (tt.want == nil) || !reflect.DeepEqual(got, tt.want) || (foreign != nil && foreign.Resources != nil) {
				t.Errorf("Foreign = %+v, want images %v", foreign, tt.want)
			}
		})
	}
}

func TestHasLabels(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", revisionLabel: "web-2"}}}
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{nil, true},
		{map[string]string{revisionLabel: "web-2"}, true},
		{map[string]string{revisionLabel: "web-1"}, false},
		{map[string]string{"app": "web", "tier": "front"}, false},
		{map[string]string{"tier": ""}, true}, // an absent label reads as empty
	}
	for _, tt := range tests {
		if got := hasLabels(pod, tt.labels); got != tt.want {
			t.Errorf("hasLabels(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}

func TestOrdinal(t *testing.T) {
	tests := []struct {
		name string
		want int
	}{
		{"web-0", 0},
		{"web-12", 12},
		{"my-web-3", 3},
		{"web", -1},
		{"web-x", -1},
		{"web-", -1},
	}
	for _, tt := range tests {
		if got := ordinal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tt.name}}); got != tt.want {
			t.Errorf("ordinal(%s) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestCheckChange(t *testing.T) {
	tmpl := webTemplate("reg/app:v1")
	sts := &statefulSet{onDelete: &onDelete{ref: Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, template: &tmpl}}
	pods := &podSet{ref: Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}, pods: []*corev1.Pod{
		runningPod("web-a", "reg/app:v1", nil, nil),
		{ObjectMeta: metav1.ObjectMeta{Name: "web-b", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "reg/app:v1"}}}},
	}}
	tests := []struct {
		name        string
		w           Workload
		images      map[string]string
		includeInit bool
		want        string
	}{
		{"template container", sts, map[string]string{"app": "reg/app:v2"}, false, ""},
		{"template init container", sts, map[string]string{"init": "reg/init:v2"}, true, ""},
		{"template init container not asked for", sts, map[string]string{"init": "reg/init:v2"}, false,
			`StatefulSet ns/web: "init" is an init container; init container images change only when asked for explicitly`},
		{"template unknown container", sts, map[string]string{"db": "reg/db:v2"}, false, `StatefulSet ns/web: no container named "db" (its containers: app, sidecar)`},
		{"template invalid image", sts, map[string]string{"app": "Reg/App:v2"}, false, `StatefulSet ns/web: container "app": image "Reg/App:v2" is not a valid reference`},
		{"no images", sts, nil, false, "StatefulSet ns/web: no container images given"},
		{"every pod has the container", &podSet{ref: pods.ref, pods: pods.pods[:1]}, map[string]string{"app": "reg/app:v2"}, false, ""},
		{"a pod lacks the container", pods, map[string]string{"app": "reg/app:v2"}, false, `pod ns/web-b: no container named "app" (its containers: main)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckChange(tt.w, Images(tt.images), tt.includeInit)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			var invalid *InvalidError
			if !errors.As(err, &invalid) {
				t.Errorf("error %T, want *InvalidError", err)
			}
		})
	}
}

func TestRestoreStrategy(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    string
		wantErr string
	}{
		{"rolling update kept", `{"type":"RollingUpdate","rollingUpdate":{"partition":2}}`, `{"rollingUpdate":{"partition":2},"type":"RollingUpdate"}`, ""},
		{"rolling update cleared when there was none", `{"type":"OnDelete"}`, `{"rollingUpdate":null,"type":"OnDelete"}`, ""},
		{"not recorded", ``, "", "decoding the recorded update strategy: unexpected end of JSON input"},
		{"not an object", `"OnDelete"`, "", "decoding the recorded update strategy: json: cannot unmarshal string"},
		{"null", `null`, "", "decoding the recorded update strategy: it is null, not an update strategy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := restoreStrategy(json.RawMessage(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("restoreStrategy = %v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			data, _ := json.Marshal(got)
			if err != nil || string(data) != tt.want {
				t.Errorf("restoreStrategy = %s, %v; want %s", data, err, tt.want)
			}
		})
	}
}

func TestStrategyJSON(t *testing.T) {
	s := appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	if got := string(strategyJSON(s)); got != `{"type":"RollingUpdate"}` {
		t.Errorf("strategyJSON = %s", got)
	}
	if got := string(strategyJSON(deploymentStrategy{Paused: true})); got != `{"paused":true}` {
		t.Errorf("strategyJSON = %s", got)
	}
}

// TestCheckKeep: an init container a rollout leaves alone must run the image the spec keeps for
// it, in the template, or in every pod of a label selector; the refusal names the container,
// where it runs another image, and the way out.
func TestCheckKeep(t *testing.T) {
	sts := func(init string) Observed {
		tmpl := webTemplate("reg/app:v1")
		tmpl.Spec.InitContainers[0].Image = init
		return &statefulSet{onDelete: &onDelete{ref: Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, template: &tmpl}}
	}
	pods := func(inits ...string) Observed {
		set := &podSet{ref: Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}}
		for i, img := range inits {
			p := runningPod(fmt.Sprintf("web-%d", i), "reg/app:v1", nil, nil)
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: img}}
			set.pods = append(set.pods, p)
		}
		return set
	}
	tests := []struct {
		name string
		w    Observed
		keep map[string]string
		want string // "" or a part of the error
	}{
		{"nothing kept", sts("reg/init:v9"), nil, ""},
		{"template runs the kept image", sts("reg/init:v1"), map[string]string{"init": "reg/init:v1"}, ""},
		{"spelled otherwise", sts("docker.io/library/busybox:latest"), map[string]string{"init": "busybox"}, ""},
		{"template runs another image", sts("reg/init:v0"), map[string]string{"init": "reg/init:v1"},
			`StatefulSet ns/web: init container "init" runs reg/init:v0, and the pod template the images come from gives it reg/init:v1`},
		{"no such init container", sts("reg/init:v1"), map[string]string{"setup": "reg/setup:v1"},
			`StatefulSet ns/web has no init container "setup"`},
		{"every pod runs the kept image", pods("reg/init:v1", "reg/init:v1"), map[string]string{"init": "reg/init:v1"}, ""},
		{"one pod runs another image", pods("reg/init:v1", "reg/init:v0"), map[string]string{"init": "reg/init:v1"},
			`pod ns/web-1: init container "init" runs reg/init:v0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKeep(tt.w, tt.keep)
			var inv *InvalidError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckKeep = %v, want nil", err)
			case tt.want != "" && (!errors.As(err, &inv) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckKeep = %T %v, want an *InvalidError saying %q", err, err, tt.want)
			}
		})
	}
}
