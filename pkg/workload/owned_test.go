package workload

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// ownedStatefulSet is StatefulSet ns/web as its manifest says it: OnDelete, its template on
// reg/app:v2, with the lock onObject when not nil.
func ownedStatefulSet(t *testing.T, onObject *testLock) *appsv1.StatefulSet {
	t.Helper()
	sts := newStatefulSet()
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	sts.Spec.Template.Spec.Containers[0].Image = "reg/app:v2"
	if onObject != nil {
		withLock(t, &sts.ObjectMeta, onObject)
	}
	return sts
}

// TestOwnedWritesTheLockAlone: every write of a rollout to the owner's template is the lock
// alone, the StatefulSet's spec as its owner wrote it.
func TestOwnedWritesTheLockAlone(t *testing.T) {
	tests := []struct {
		name     string
		onObject *testLock
		op       workloadOp
		lock     *testLock
	}{
		{"start", nil, opStart, recordedLock("Progressing", "reg/app:v2")},
		{"retarget", recordedLock("Progressing", "reg/app:v2"), opRetarget, recordedLock("Progressing", "reg/app:v3")},
		{"finalize", recordedLock("Progressing", "reg/app:v2"), opFinalize, recordedLock("Succeeded", "reg/app:v2")},
		{"restore", recordedLock("RollingBack", "reg/app:v2"), opRestore, recordedLock("RolledBack", "reg/app:v2")},
		{"restore asked to replace the template", recordedLock("RollingBack", "reg/app:v2"), opRestoreForeign, recordedLock("RolledBack", "reg/app:v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := ownedStatefulSet(t, tt.onObject)
			client := fake.NewClientset(sts)
			w, err := Owned(mustLoad(t, client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}))
			if err != nil {
				t.Fatal(err)
			}
			client.ClearActions()
			done, err := tt.op(context.Background(), w, tt.lock)
			if err != nil || !done {
				t.Fatalf("done %v, error %v; want done", done, err)
			}
			checkObjectPatch(t, client, "statefulsets", "web", "41", "", tt.lock)
			stored, err := client.AppsV1().StatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(stored.Spec, sts.Spec) {
				t.Errorf("spec changed:\n%+v\nwant the owner's\n%+v", stored.Spec, sts.Spec)
			}
		})
	}
}

// TestOwnedCheckStart: a rollout to the owner's template needs OnDelete and the template's
// images, and goes whatever revision the pods are at.
func TestOwnedCheckStart(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*appsv1.StatefulSet)
		images  map[string]string
		wantErr string
	}{
		{name: "the template's images", images: map[string]string{"app": "reg/app:v2"}},
		{name: "other images", images: map[string]string{"app": "reg/app:v3"}, wantErr: `its template runs {"app":"reg/app:v2"}, not {"app":"reg/app:v3"}`},
		{name: "an unknown container", images: map[string]string{"db": "reg/db:v2"}, wantErr: `no container named "db"`},
		{name: "RollingUpdate", images: map[string]string{"app": "reg/app:v2"}, wantErr: "its updateStrategy is RollingUpdate; a rollout in place to its own template needs OnDelete",
			modify: func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := ownedStatefulSet(t, nil)
			if tt.modify != nil {
				tt.modify(sts)
			}
			// Its pods run the revision before the owner's last apply.
			client := fake.NewClientset(sts, stsPod("web-0", "web-0"), stsPod("web-1", "web-0"), stsPod("web-2", "web-0"))
			w, err := Owned(mustLoad(t, client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}))
			if err != nil {
				t.Fatal(err)
			}
			err = w.CheckStart(Images(tt.images), false)
			var inv *InvalidError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckStart = %v, want nil", err)
			case tt.wantErr != "" && (!errors.As(err, &inv) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CheckStart = %v, want an InvalidError saying %q", err, tt.wantErr)
			}
			if labels, ok, err := w.RevisionLabels(Images(tt.images)); labels != nil || !ok || err != nil {
				t.Errorf("RevisionLabels = %v %v %v, want none: the rollout brings them", labels, ok, err)
			}
		})
	}
}

// TestOwnedKinds: a StatefulSet or a DaemonSet has an owner's template to roll out to; a
// Deployment is refused.
func TestOwnedKinds(t *testing.T) {
	client := fake.NewClientset(newStatefulSet(), newDaemonSet(), newDeployment())
	for _, ref := range []Ref{{Kind: StatefulSet, Namespace: "ns", Name: "web"}, {Kind: DaemonSet, Namespace: "ns", Name: "agent"}} {
		w, err := Owned(mustLoad(t, client, ref))
		if err != nil {
			t.Errorf("Owned(%s) = %v", ref, err)
			continue
		}
		if again, err := Owned(w); err != nil || again != w {
			t.Errorf("Owned of an owned %s = %v, %v; want itself", ref, again, err)
		}
	}
	_, err := Owned(mustLoad(t, client, Ref{Kind: Deployment, Namespace: "ns", Name: "api"}))
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "only a StatefulSet or a DaemonSet") {
		t.Errorf("Owned(Deployment) = %v, want an InvalidError", err)
	}
}
