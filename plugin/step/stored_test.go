package step

import (
	"bytes"
	"encoding/gob"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// throughGob is ro as a plugin receives it from Argo: encoded and decoded with gob.
func throughGob(t *testing.T, ro *argov1alpha1.Rollout) *argov1alpha1.Rollout {
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

// The cpu and memory that fromRollout takes are read from the API server: through gob they
// arrive as 0.
func TestFromRolloutReadsTheTemplatesResourcesAgain(t *testing.T) {
	stored := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", Generation: 3}}
	stored.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "reg.example/app:v2", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}}
	sent := throughGob(t, stored)
	if q := sent.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !q.IsZero() {
		t.Fatalf("gob kept cpu %s: the plugin need not read the Rollout again", q.String())
	}
	fromRollout := &types.RpcStepContext{Config: []byte(`{"fromRollout": true}`)}
	clients := Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: fake.NewClientset()}}, Rollouts: argofake.NewSimpleClientset(stored)}
	p := New(func() (Clients, error) { return clients, nil }, Options{})
	t.Cleanup(p.Close)

	got, err := p.withStoredResources(sent, fromRollout)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Spec.Template.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "150m" || r.Limits.Memory().String() != "128Mi" {
		t.Errorf("resources after reading the Rollout again: %v, want cpu request 150m, memory limit 128Mi", r)
	}
	if q := sent.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !q.IsZero() {
		t.Errorf("the Rollout Argo sent was changed")
	}

	// Images alone: nothing to read.
	if got, err := p.withStoredResources(sent, &types.RpcStepContext{Config: []byte(`{"images": {"app": "x:v2"}}`)}); err != nil || got != sent {
		t.Errorf("a config without fromRollout: %v, %v; want the Rollout as sent", got, err)
	}
	// A Rollout changed since Argo's call: the next call takes it.
	older := throughGob(t, stored)
	older.Generation = 2
	if _, err := p.withStoredResources(older, fromRollout); err == nil || !strings.Contains(err.Error(), "changed since this call began (generation 2, now 3)") {
		t.Errorf("a call about generation 2 of a Rollout now at 3: %v", err)
	}
}
