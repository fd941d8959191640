package workload

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func TestListLocks(t *testing.T) {
	held := func(holder, phase string) *testLock {
		return &testLock{Holder: holder, RolloutID: "r1", Phase: phase, Images: map[string]string{"app": "reg/app:v2"}}
	}
	meta := func(ns, name string, lock *testLock) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: ns, Name: name}
		if lock != nil {
			withLock(t, &m, lock)
		}
		return m
	}
	podLock := func(ns, sel string, lock *testLock) *corev1.ConfigMap {
		m := meta(ns, PodLockName(sel), lock)
		m.Annotations[SelectorAnnotation] = sel
		return &corev1.ConfigMap{ObjectMeta: m}
	}
	other := &corev1.ConfigMap{ObjectMeta: meta("a", "unrelated", nil)}
	// A ConfigMap with our prefix whose name is not its selector's is someone else's.
	forged := podLock("a", "app=x", held("argo:a/x", "Progressing"))
	forged.Name = lockConfigMapPrefix + "0000000000"
	bad := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "bad", Annotations: map[string]string{LockAnnotation: "{"}}}
	objects := []runtime.Object{
		&appsv1.StatefulSet{ObjectMeta: meta("a", "web", held("argo:a/web", "Progressing"))},
		&appsv1.StatefulSet{ObjectMeta: meta("a", "done", held("argo:a/done", "Succeeded"))},
		&appsv1.StatefulSet{ObjectMeta: meta("a", "plain", nil)},
		&appsv1.DaemonSet{ObjectMeta: meta("b", "agent", held("argo:b/agent", "RollingBack"))},
		&appsv1.Deployment{ObjectMeta: meta("b", "api", held("tekton:b/run", "Paused"))},
		&appsv1.Deployment{ObjectMeta: meta("a", "cli", held("cli", "Holding"))},
		podLock("a", "app=loose", held("argo:a/loose", "Halted")),
		other, forged, bad,
	}
	// ListLocks lists every lock, finished or not: which hold a workload, and whose, the
	// rollout judges (pkg/rollout's TestListRecords).
	tests := []struct {
		name, namespace string
		want            []string
	}{
		{"every namespace", "", []string{"DaemonSet b/agent argo:b/agent", "Deployment a/cli cli", "Deployment b/api tekton:b/run",
			"StatefulSet a/done argo:a/done", "StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}},
		{"one namespace", "a", []string{"Deployment a/cli cli", "StatefulSet a/done argo:a/done", "StatefulSet a/web argo:a/web",
			"pods in a matching \"app=loose\" argo:a/loose"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locks, err := ListLocks(context.Background(), fake.NewClientset(objects...), tt.namespace)
			var got []string
			for _, l := range locks {
				var rec testLock
				if err := json.Unmarshal([]byte(l.Lock.Record), &rec); err != nil {
					t.Fatal(err)
				}
				got = append(got, l.Ref.String()+" "+rec.Holder)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("locks:\n got %q\nwant %q", got, tt.want)
			}
			var le *LockError
			if wantErr := tt.namespace == "" || tt.namespace == "b"; wantErr != errors.As(err, &le) {
				t.Errorf("error %v: want the unreadable lock of StatefulSet b/bad reported: %v", err, wantErr)
			}
			if le != nil && le.Name != "bad" {
				t.Errorf("error names %s, want bad", le.Name)
			}
		})
	}
}
