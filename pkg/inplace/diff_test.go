package inplace

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", ResourceVersion: "42", UID: "uid-1"},
		Spec: corev1.PodSpec{
			NodeName:       "node-0",
			RestartPolicy:  corev1.RestartPolicyAlways,
			InitContainers: []corev1.Container{{Name: "init", Image: "reg.example/init:v1"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "reg.example/app:v1"},
				{Name: "proxy", Image: "nginx"},
			},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{
				running("app", "reg.example/app:v1", "reg.example/app@sha256:"+strings.Repeat("1", 64), 0),
				running("proxy", "docker.io/library/nginx:latest", "docker.io/library/nginx@sha256:"+strings.Repeat("2", 64), 0),
			},
		},
	}
}

func running(name, image, imageID string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Image: image, ImageID: imageID, RestartCount: restarts, Ready: true,
		ContainerID: "containerd://" + name,
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Unix(1000, 0)}},
	}
}

// withSidecar adds the native sidecar mesh (an init container with restartPolicy Always) on
// reg.example/mesh:v1 to a pod spec, after its init container.
func withSidecar(s *corev1.PodSpec) {
	always := corev1.ContainerRestartPolicyAlways
	s.InitContainers = append(s.InitContainers, corev1.Container{Name: "mesh", Image: "reg.example/mesh:v1", RestartPolicy: &always})
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name    string
		pod     func(*corev1.PodSpec) // changes testPod's spec; nil leaves it
		target  Target
		changes []string // container names
		noop    bool
		err     string
	}{
		{name: "one image changes", target: Target{Images: map[string]string{"app": "reg.example/app:v2"}}, changes: []string{"app"}},
		{name: "same image after normalisation is a no-op", target: Target{Images: map[string]string{"proxy": "docker.io/library/nginx:latest"}}, noop: true},
		{name: "unknown container", target: Target{Images: map[string]string{"db": "postgres:16"}}, err: `pod ns/web-0: no container named "db" (its containers: app, proxy)`},
		{name: "invalid reference", target: Target{Images: map[string]string{"app": "reg.example/App:V2"}}, err: `container "app": image "reg.example/App:V2" is not a valid reference`},
		{name: "empty image", target: Target{Images: map[string]string{"app": ""}}, err: `container "app": image is empty`},
		{name: "init container without asking", target: Target{Images: map[string]string{"init": "reg.example/init:v2"}}, err: `"init" is an init container`},
		{name: "init container when asked", target: Target{Images: map[string]string{"init": "reg.example/init:v2"}, IncludeInit: true}, changes: []string{"init"}},
		{name: "native sidecar without asking", pod: withSidecar, target: Target{Images: map[string]string{"mesh": "reg.example/mesh:v2", "app": "reg.example/app:v2"}}, changes: []string{"mesh", "app"}},
		{name: "native sidecar on its image", pod: withSidecar, target: Target{Images: map[string]string{"mesh": "reg.example/mesh:v1"}}, noop: true},
		{name: "plain init container beside a native sidecar", pod: withSidecar, target: Target{Images: map[string]string{"mesh": "reg.example/mesh:v2", "init": "reg.example/init:v2"}}, err: `"init" is an init container`},
		{name: "no images", target: Target{}, err: "no container images given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.pod != nil {
				tt.pod(&pod.Spec)
			}
			plan, err := Diff(pod, tt.target)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if plan.NoOp() != tt.noop {
				t.Errorf("NoOp = %v, want %v (%s)", plan.NoOp(), tt.noop, plan)
			}
			var got []string
			for _, c := range plan.Changes {
				got = append(got, c.Container)
			}
			if strings.Join(got, ",") != strings.Join(tt.changes, ",") {
				t.Errorf("changes = %v, want %v", got, tt.changes)
			}
		})
	}
}

func TestDiffSpecs(t *testing.T) {
	base := testPod().Spec
	withSidecar(&base)
	tests := []struct {
		name   string
		mutate func(*corev1.PodSpec)
		init   bool
		images map[string]string
		err    string
	}{
		{name: "image only", mutate: func(s *corev1.PodSpec) { s.Containers[0].Image = "reg.example/app:v2" }, images: map[string]string{"app": "reg.example/app:v2"}},
		{name: "env changes", mutate: func(s *corev1.PodSpec) { s.Containers[1].Env = []corev1.EnvVar{{Name: "A", Value: "1"}} }, err: "spec.containers[1].env differs"},
		{name: "container added", mutate: func(s *corev1.PodSpec) { s.Containers = append(s.Containers, corev1.Container{Name: "x", Image: "x"}) }, err: "spec.containers: 2 containers, want 3"},
		{name: "container renamed", mutate: func(s *corev1.PodSpec) { s.Containers[0].Name = "main" }, err: `spec.containers[0].name: "app", want "main"`},
		{name: "init image without asking", mutate: func(s *corev1.PodSpec) { s.InitContainers[0].Image = "reg.example/init:v2" }, err: "spec.initContainers[0].image"},
		{name: "init image when asked", init: true, mutate: func(s *corev1.PodSpec) { s.InitContainers[0].Image = "reg.example/init:v2" }, images: map[string]string{"init": "reg.example/init:v2"}},
		{name: "native sidecar image without asking", mutate: func(s *corev1.PodSpec) { s.InitContainers[1].Image = "reg.example/mesh:v2" }, images: map[string]string{"mesh": "reg.example/mesh:v2"}},
		{name: "native sidecar no longer one", mutate: func(s *corev1.PodSpec) {
			s.InitContainers[1].Image, s.InitContainers[1].RestartPolicy = "reg.example/mesh:v2", nil
		}, err: "spec.initContainers[1].image"},
		{name: "native sidecar no longer one, init asked", init: true, mutate: func(s *corev1.PodSpec) { s.InitContainers[1].RestartPolicy = nil }, err: "spec.initContainers[1].restartPolicy differs"},
		{name: "service account changes", mutate: func(s *corev1.PodSpec) { s.ServiceAccountName = "other" }, err: "spec.serviceAccountName differs"},
		{name: "invalid image", mutate: func(s *corev1.PodSpec) { s.Containers[0].Image = "bad image" }, err: "not a valid reference"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := *base.DeepCopy()
			tt.mutate(&desired)
			images, err := DiffSpecs(base, desired, tt.init)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(images) != len(tt.images) {
				t.Fatalf("images = %v, want %v", images, tt.images)
			}
			for k, v := range tt.images {
				if images[k] != v {
					t.Errorf("images[%s] = %q, want %q", k, images[k], v)
				}
			}
		})
	}
}

func TestImageHelpers(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	tests := []struct{ got, want string }{
		{normalizeImage("nginx"), "docker.io/library/nginx:latest"},
		{normalizeImage("docker-pullable://nginx@" + d), "docker.io/library/nginx@" + d},
		{normalizeImage("localhost:5000/app"), "localhost:5000/app:latest"},
		{digestOf("docker-pullable://reg.example/app@" + d), d},
		{digestOf("sha256:" + strings.Repeat("b", 64)), ""},
		{digestOf("reg.example/app:v1"), ""},
		{pinnedImage("reg.example/app:v1", d), "reg.example/app@" + d},
		{pinnedImage("nginx:1.25", d), "nginx@" + d},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
	if !SameImage("nginx", "docker.io/library/nginx:latest") || SameImage("nginx:1", "nginx:2") {
		t.Error("sameImage does not normalise")
	}
}

func TestNormalizeImageRemembersABoundedNumber(t *testing.T) {
	for i := range maxNormalized + 10 {
		if got, want := normalizeImage(fmt.Sprintf("app:v%d", i)), fmt.Sprintf("docker.io/library/app:v%d", i); got != want {
			t.Fatalf("normalizeImage = %q, want %q", got, want)
		}
	}
	normalized.Lock()
	n := len(normalized.m)
	normalized.Unlock()
	if n > maxNormalized {
		t.Errorf("%d images remembered, want at most %d", n, maxNormalized)
	}
	// Answers from memory are the same as computed ones.
	for range 2 {
		if got := normalizeImage("docker-pullable://nginx"); got != "docker.io/library/nginx:latest" {
			t.Errorf("normalizeImage(docker-pullable://nginx) = %q", got)
		}
	}
}

// TestDiffTemplates: images, labels and annotations change in place, each label or annotation
// with its new value (nil: removed); any other difference names its field.
func TestDiffTemplates(t *testing.T) {
	base := corev1.PodTemplateSpec{Spec: resizablePod().Spec}
	base.Labels = map[string]string{"app": "web", "app.kubernetes.io/version": "1.0", "helm.sh/chart": "web-1.0"}
	base.Annotations = map[string]string{"checksum/config": "aaa", "team": "shop"}
	v := func(s string) *string { return &s }
	tests := []struct {
		name        string
		mutate      func(*corev1.PodTemplateSpec)
		images      map[string]string
		resources   map[string]Resources
		labels      map[string]*string
		annotations map[string]*string
		err         string
	}{
		{name: "nothing", mutate: func(*corev1.PodTemplateSpec) {}, images: map[string]string{}, labels: map[string]*string{}, annotations: map[string]*string{}},
		{name: "a chart's bump: image, version label, chart label, config checksum", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Image = "reg.example/app:v2"
			p.Labels["app.kubernetes.io/version"], p.Labels["helm.sh/chart"] = "2.0", "web-2.0"
			p.Annotations["checksum/config"] = "bbb"
		}, images: map[string]string{"app": "reg.example/app:v2"},
			labels:      map[string]*string{"app.kubernetes.io/version": v("2.0"), "helm.sh/chart": v("web-2.0")},
			annotations: map[string]*string{"checksum/config": v("bbb")}},
		{name: "a label added and an annotation removed", mutate: func(p *corev1.PodTemplateSpec) {
			p.Labels["tier"] = "front"
			delete(p.Annotations, "team")
		}, images: map[string]string{}, labels: map[string]*string{"tier": v("front")}, annotations: map[string]*string{"team": nil}},
		{name: "env changes with the image", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Image = "reg.example/app:v2"
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
		}, err: "template.spec.containers[0].env differs"},
		{name: "metadata beyond labels and annotations", mutate: func(p *corev1.PodTemplateSpec) { p.Finalizers = []string{"x"} },
			err: "template.metadata differs beyond labels and annotations"},
		{name: "CPU with the image", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Image = "reg.example/app:v2"
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("150m")
		}, images: map[string]string{"app": "reg.example/app:v2"}, resources: map[string]Resources{"app": {Requests: list("cpu", "150m")}},
			labels: map[string]*string{}, annotations: map[string]*string{}},
		{name: "0.1 and 100m are one value", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.1")
		}, images: map[string]string{}, labels: map[string]*string{}, annotations: map[string]*string{}},
		{name: "a limit removed", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Limits = nil
		}, err: "template.spec.containers[0].resources.limits.cpu (container \"app\"): the template removes it"},
		{name: "a resource other than cpu and memory", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceEphemeralStorage] = resource.MustParse("1Gi")
		}, err: "template.spec.containers[0].resources.limits.ephemeral-storage differs: only container images and CPU and memory values can change in place"},
		{name: "a limit below its request", mutate: func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("50m")
		}, err: "cpu limit 50m is below its request 100m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := *base.DeepCopy()
			tt.mutate(&desired)
			got, err := DiffTemplates(base, desired, false)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.resources == nil {
				tt.resources = map[string]Resources{}
			}
			if !reflect.DeepEqual(got.Images, tt.images) || !reflect.DeepEqual(got.Labels, tt.labels) || !reflect.DeepEqual(got.Annotations, tt.annotations) ||
				spew(got.Resources) != spew(tt.resources) {
				t.Errorf("DiffTemplates = %s, want images %v, resources %s, labels %s, annotations %s", spew(got), tt.images, spew(tt.resources), spew(tt.labels), spew(tt.annotations))
			}
		})
	}
}

// spew shows a value with its pointers followed, for a failure message.
func spew(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
