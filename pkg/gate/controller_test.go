package gate

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestSyncRetriesAConflictByDecidingAgain: the first write conflicts because the pod changed
// since the cache saw it. The controller reads the pod again and decides on what it reads:
// it writes again (with the new resourceVersion) only if the pod still needs the gate.
func TestSyncRetriesAConflictByDecidingAgain(t *testing.T) {
	tests := []struct {
		name string
		// changed is the pod as it is on the server when the first write conflicts.
		changed   func(*corev1.Pod)
		wantWrite []string // resourceVersions of the writes made
	}{
		{"the engine drained it meanwhile: no second write", func(p *corev1.Pod) {
			p.Annotations = map[string]string{inplace.StateAnnotation: `{"startedAt":"2026-01-01T00:00:00Z","containers":[],"stage":"Draining","stageAt":"2026-01-01T00:00:00Z"}`}
			p.Status.Conditions = []corev1.PodCondition{{Type: inplace.ReadinessGate, Status: corev1.ConditionFalse}}
		}, []string{"1"}},
		{"only a label changed: written again on the new version", func(p *corev1.Pod) {
			p.Labels = map[string]string{"extra": "yes"}
		}, []string{"1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cached := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", UID: "u1", ResourceVersion: "1"},
				Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}},
			}
			server := cached.DeepCopy()
			tt.changed(server)
			server.ResourceVersion = "2"
			client := fake.NewClientset()
			var writes []string
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, server.DeepCopy(), nil
			})
			client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				pa := a.(k8stesting.PatchAction)
				if pa.GetSubresource() != "status" {
					t.Errorf("patch of subresource %q, want status", pa.GetSubresource())
				}
				var body struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
					Status   corev1.PodStatus  `json:"status"`
				}
				if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
					t.Fatal(err)
				}
				writes = append(writes, body.Metadata.ResourceVersion)
				if body.Metadata.ResourceVersion != server.ResourceVersion {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "web-0", nil)
				}
				if len(body.Status.Conditions) != 1 || body.Status.Conditions[0].Type != inplace.ReadinessGate || body.Status.Conditions[0].Status != corev1.ConditionTrue {
					t.Errorf("patch conditions %+v, want only %s True", body.Status.Conditions, inplace.ReadinessGate)
				}
				return true, server.DeepCopy(), nil
			})
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := indexer.Add(cached); err != nil {
				t.Fatal(err)
			}
			c, err := New(client, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c.pods = corelisters.NewPodLister(indexer)
			if err := c.sync(context.Background(), "ns/web-0"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if len(writes) != len(tt.wantWrite) {
				t.Fatalf("writes on resourceVersions %v, want %v", writes, tt.wantWrite)
			}
			for i := range writes {
				if writes[i] != tt.wantWrite[i] {
					t.Errorf("writes on resourceVersions %v, want %v", writes, tt.wantWrite)
				}
			}
		})
	}
}
