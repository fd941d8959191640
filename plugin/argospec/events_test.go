package argospec

import (
	"context"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRecordOnce(t *testing.T) {
	rollout := func(name, uid string, generation int64) *argov1alpha1.Rollout {
		return &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + uid), Generation: generation}}
	}
	// Cut to make room for the hash, it would end in a dash.
	long := strings.Repeat("a", 235) + "-" + strings.Repeat("b", 17)
	tests := []struct {
		name    string
		calls   []*argov1alpha1.Rollout
		created []bool
	}{
		{"once per generation", []*argov1alpha1.Rollout{rollout("web", "1", 1), rollout("web", "1", 1)}, []bool{true, false}},
		{"a new generation", []*argov1alpha1.Rollout{rollout("web", "1", 1), rollout("web", "1", 2)}, []bool{true, true}},
		{"the Rollout created again", []*argov1alpha1.Rollout{rollout("web", "1", 1), rollout("web", "2", 1)}, []bool{true, true}},
		{"the longest name, cut", []*argov1alpha1.Rollout{rollout(long, "1", 1), rollout(long, "1", 1)}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			for i, ro := range tt.calls {
				created, err := RecordOnce(context.Background(), client, ro, "test", EventInvalidConfig, "the message")
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if created != tt.created[i] {
					t.Errorf("call %d created %v, want %v", i, created, tt.created[i])
				}
				if errs := validation.IsDNS1123Subdomain(eventName(ro, EventInvalidConfig)); len(errs) > 0 {
					t.Errorf("call %d: Event name %q: %v", i, eventName(ro, EventInvalidConfig), errs)
				}
			}
		})
	}
}
