package rollout

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Lock reads a workload's lock with exactly one GET, whatever the kind, and writes nothing.
func TestLockOneGet(t *testing.T) {
	const lockJSON = `{"holder":"argo:shop/web","rolloutID":"abc-1","specHash":"abc","images":{"app":"reg.example/app:v2"},"previousImages":null,"phase":"Succeeded","startedAt":"2026-03-01T12:00:00Z"}`
	locked := metav1.ObjectMeta{Name: testName, Namespace: testNS, Annotations: map[string]string{workload.LockAnnotation: lockJSON}}
	bare := metav1.ObjectMeta{Name: testName, Namespace: testNS}
	selector := "app=web"
	// The ConfigMap of a selector's lock is found through a Pods workload's own write.
	podsLock := func(t *testing.T) runtime.Object {
		t.Helper()
		client := fake.NewClientset(runningPod("web-0", imageV1))
		w, err := workload.Load(context.Background(), client, workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background(), &workload.Lock{Holder: "argo:shop/web", RolloutID: "abc-1", Phase: workload.LockSucceeded}); err != nil {
			t.Fatal(err)
		}
		cms, err := client.CoreV1().ConfigMaps(testNS).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(cms.Items) != 1 {
			t.Fatalf("the lock ConfigMap: %v, %d ConfigMaps", err, len(cms.Items))
		}
		return &cms.Items[0]
	}
	tests := []struct {
		name    string
		objects func(t *testing.T) []runtime.Object
		ref     workload.Ref
		// rolloutID of the lock read; empty for none.
		rolloutID string
		invalid   bool
	}{
		{"StatefulSet with a lock", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.StatefulSet{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "abc-1", false},
		{"StatefulSet without", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.StatefulSet{ObjectMeta: bare}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "", false},
		{"DaemonSet", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.DaemonSet{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.DaemonSet, Namespace: testNS, Name: testName}, "abc-1", false},
		{"Deployment", func(*testing.T) []runtime.Object { return []runtime.Object{&appsv1.Deployment{ObjectMeta: locked}} },
			workload.Ref{Kind: workload.Deployment, Namespace: testNS, Name: testName}, "abc-1", false},
		{"Pods with a lock", func(t *testing.T) []runtime.Object { return []runtime.Object{podsLock(t)} },
			workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector}, "abc-1", false},
		{"Pods never rolled out", func(*testing.T) []runtime.Object { return []runtime.Object{runningPod("web-0", imageV1)} },
			workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: selector}, "", false},
		{"no such StatefulSet", func(*testing.T) []runtime.Object { return []runtime.Object{&corev1.ConfigMap{ObjectMeta: bare}} },
			workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects(t)...)
			client.ClearActions()
			lock, err := (&Engine{Client: client}).Lock(context.Background(), tt.ref)
			var inv *InvalidError
			switch {
			case tt.invalid && !errors.As(err, &inv):
				t.Fatalf("Lock error %v, want an *InvalidError", err)
			case !tt.invalid && err != nil:
				t.Fatalf("Lock: %v", err)
			}
			got := ""
			if lock != nil {
				got = lock.RolloutID
			}
			if got != tt.rolloutID {
				t.Errorf("lock of rollout %q, want %q", got, tt.rolloutID)
			}
			actions := client.Actions()
			if len(actions) != 1 || actions[0].GetVerb() != "get" {
				var verbs []string
				for _, a := range actions {
					verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
				}
				t.Errorf("API calls %v, want one get", verbs)
			}
		})
	}
}
