package step

import (
	"bytes"
	"encoding/gob"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// overGob is ro as Argo hands it to the plugin: through gob.
func overGob(t *testing.T, ro *argov1alpha1.Rollout) *argov1alpha1.Rollout {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(ro); err != nil {
		t.Fatal(err)
	}
	var out argov1alpha1.Rollout
	if err := gob.NewDecoder(&buf).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestTemplateResourcesReadAgain: gob drops a quantity's value, so the cpu and memory of the
// Rollout's template arrive as 0; fromRollout takes them from the Rollout the API server has, of
// the call's generation, and says so when it cannot.
func TestTemplateResourcesReadAgain(t *testing.T) {
	stored := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shop-web", UID: "ro-uid", Generation: 3}}
	stored.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "reg/app:v2", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m")},
	}}}
	arrived := overGob(t, stored)
	if q := arrived.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !q.IsZero() {
		t.Fatalf("gob kept the cpu request %s: the read below would be needless", q.String())
	}
	newer := stored.DeepCopy()
	newer.Generation = 4
	tests := []struct {
		name    string
		clients Clients
		wantCPU string // the cpu request read, when no error
		wantErr string
	}{
		{"read from the API server", Clients{Rollouts: argofake.NewSimpleClientset(stored)}, "150m", ""},
		{"a later generation", Clients{Rollouts: argofake.NewSimpleClientset(newer)}, "", "changed since Argo called (generation 3, now 4)"},
		{"gone", Clients{Rollouts: argofake.NewSimpleClientset()}, "", "reading Rollout shop/shop-web for the cpu and memory of its template"},
		{"no client of Rollouts", Clients{}, "0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.clients.Driver = &rollout.Driver{Engine: &rollout.Engine{Client: fake.NewClientset()}}
			p := newPluginWith(t, tt.clients, Options{})
			ro, err := p.withTemplateResources(arrived)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := ro.Spec.Template.Spec.Containers[0].Resources
			if got := r.Requests.Cpu().String(); got != tt.wantCPU {
				t.Errorf("cpu request %s, want %s", got, tt.wantCPU)
			}
			if ro.Spec.Template.Spec.Containers[0].Image != "reg/app:v2" {
				t.Errorf("image %q, want the call's", ro.Spec.Template.Spec.Containers[0].Image)
			}
		})
	}
	if q := arrived.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !q.IsZero() {
		t.Error("the call's Rollout was changed in place")
	}
}

// TestTemplateWithoutResourcesIsNotRead: a template that declares no resources is used as Argo
// gave it, with no request.
func TestTemplateWithoutResourcesIsNotRead(t *testing.T) {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shop-web"}}
	ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "reg/app:v2"}}
	rollouts := argofake.NewSimpleClientset()
	p := newPluginWith(t, Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: fake.NewClientset()}}, Rollouts: rollouts}, Options{})
	got, err := p.withTemplateResources(ro)
	if err != nil || got != ro {
		t.Fatalf("withTemplateResources = %p, %v; want the call's Rollout", got, err)
	}
	for _, a := range rollouts.Actions() {
		if a.GetVerb() == "get" {
			t.Errorf("read the Rollout: %v", a)
		}
	}
}
