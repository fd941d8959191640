package workload

import (
	"context"
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
	held := func(holder, phase string) *Lock {
		return &Lock{Holder: holder, RolloutID: "r1", Phase: phase, Images: map[string]string{"app": "reg/app:v2"}}
	}
	meta := func(ns, name string, lock *Lock) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: ns, Name: name}
		if lock != nil {
			withLock(t, &m, lock)
		}
		return m
	}
	podLock := func(ns, sel string, lock *Lock) *corev1.ConfigMap {
		m := meta(ns, lockConfigMapName(sel), lock)
		m.Annotations[SelectorAnnotation] = sel
		return &corev1.ConfigMap{ObjectMeta: m}
	}
	other := &corev1.ConfigMap{ObjectMeta: meta("a", "unrelated", nil)}
	// A ConfigMap with our prefix whose name is not its selector's is someone else's.
	forged := podLock("a", "app=x", held("argo:a/x", LockProgressing))
	forged.Name = lockConfigMapPrefix + "0000000000"
	bad := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "bad", Annotations: map[string]string{LockAnnotation: "{"}}}
	objects := []runtime.Object{
		&appsv1.StatefulSet{ObjectMeta: meta("a", "web", held("argo:a/web", LockProgressing))},
		&appsv1.StatefulSet{ObjectMeta: meta("a", "done", held("argo:a/done", LockSucceeded))},
		&appsv1.StatefulSet{ObjectMeta: meta("a", "plain", nil)},
		&appsv1.DaemonSet{ObjectMeta: meta("b", "agent", held("argo:b/agent", LockRollingBack))},
		&appsv1.Deployment{ObjectMeta: meta("b", "api", held("tekton:b/run", LockPaused))},
		&appsv1.Deployment{ObjectMeta: meta("a", "cli", held("cli", LockHolding))},
		podLock("a", "app=loose", held("argo:a/loose", LockHalted)),
		other, forged, bad,
	}
	tests := []struct {
		name, namespace, prefix string
		want                    []string
	}{
		{"argo holders everywhere", "", "argo:", []string{"DaemonSet b/agent argo:b/agent", "StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}},
		{"argo holders of one namespace", "a", "argo:", []string{"StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}},
		{"tekton holders", "", "tekton:", []string{"Deployment b/api tekton:b/run"}},
		{"every holder", "", "", []string{"DaemonSet b/agent argo:b/agent", "Deployment a/cli cli", "Deployment b/api tekton:b/run", "StatefulSet a/web argo:a/web", "pods in a matching \"app=loose\" argo:a/loose"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locks, err := ListLocks(context.Background(), fake.NewClientset(objects...), tt.namespace, tt.prefix)
			var got []string
			for _, l := range locks {
				got = append(got, l.Ref.String()+" "+l.Lock.Holder)
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
