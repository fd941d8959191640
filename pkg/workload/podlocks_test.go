package workload

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestListPodLocks lists the ConfigMaps of ns that carry the lock prefix, each with its lock
// as read (none when unreadable or absent), and nothing else.
func TestListPodLocks(t *testing.T) {
	good := recordedLock("Succeeded", "reg/app:v2")
	cm := func(name, raw string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "rv-" + name}}
		if raw != "" {
			c.Annotations = map[string]string{LockAnnotation: raw}
		}
		return c
	}
	client := fake.NewClientset(
		cm(lockConfigMapPrefix+"good", good.encode()),
		cm(lockConfigMapPrefix+"bad", `{"previousStrategy":"OnDelete"}`),
		cm(lockConfigMapPrefix+"none", ""),
		cm("unrelated", good.encode()),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lockConfigMapPrefix + "elsewhere", Namespace: "other"}},
	)
	got, err := ListPodLocks(context.Background(), client, "ns")
	if err != nil {
		t.Fatal(err)
	}
	want := []PodLock{
		{Name: lockConfigMapPrefix + "bad", ResourceVersion: "rv-" + lockConfigMapPrefix + "bad"},
		{Name: lockConfigMapPrefix + "good", ResourceVersion: "rv-" + lockConfigMapPrefix + "good", Lock: good.lock()},
		{Name: lockConfigMapPrefix + "none", ResourceVersion: "rv-" + lockConfigMapPrefix + "none"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListPodLocks = %+v\nwant %+v", got, want)
	}

	failCalls(client, "list", "configmaps", apierrors.NewInternalError(errors.New("etcd is down")))
	if _, err := ListPodLocks(context.Background(), client, "ns"); err == nil || !strings.Contains(err.Error(), "listing the ConfigMaps of ns") {
		t.Errorf("error %v, want the failed list, naming the namespace", err)
	}
}

// TestDeletePodLock deletes with the resourceVersion judged as its precondition, so that the
// API server leaves a lock changed since alone.
func TestDeletePodLock(t *testing.T) {
	name := lockConfigMapPrefix + "a"
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7"}})
	if err := DeletePodLock(context.Background(), client, "ns", PodLock{Name: name, ResourceVersion: "7"}); err != nil {
		t.Fatal(err)
	}
	var deletes int
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			deletes++
			if pre := d.GetDeleteOptions().Preconditions; pre == nil || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
				t.Errorf("delete with preconditions %+v, want resourceVersion 7", pre)
			}
		}
	}
	if deletes != 1 {
		t.Errorf("%d deletes, want 1", deletes)
	}
	if err := DeletePodLock(context.Background(), client, "ns", PodLock{Name: name, ResourceVersion: "7"}); !apierrors.IsNotFound(err) ||
		!strings.HasPrefix(err.Error(), "deleting ConfigMap ns/"+name) {
		t.Errorf("delete of a lock gone: %v, want NotFound, naming the ConfigMap", err)
	}
}

// TestReadLock reads the lock of every kind with one GET and writes nothing; a workload that
// does not exist is bad input, and so is a kind no version knows.
func TestReadLock(t *testing.T) {
	lock := recordedLock("Succeeded", "reg/app:v2")
	locked := metav1.ObjectMeta{Name: "web", Namespace: "ns", Annotations: map[string]string{LockAnnotation: lock.encode()}}
	podsCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PodLockName("app=web"), Namespace: "ns",
		Annotations: map[string]string{LockAnnotation: lock.encode()}}}
	tests := []struct {
		name    string
		objects []runtime.Object
		ref     Ref
		want    *Lock
		wantErr string
		invalid bool
	}{
		{"StatefulSet", []runtime.Object{&appsv1.StatefulSet{ObjectMeta: locked}}, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, lock.lock(), "", false},
		{"DaemonSet", []runtime.Object{&appsv1.DaemonSet{ObjectMeta: locked}}, Ref{Kind: DaemonSet, Namespace: "ns", Name: "web"}, lock.lock(), "", false},
		{"Deployment", []runtime.Object{&appsv1.Deployment{ObjectMeta: locked}}, Ref{Kind: Deployment, Namespace: "ns", Name: "web"}, lock.lock(), "", false},
		{"pods", []runtime.Object{podsCM}, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}, lock.lock(), "", false},
		{"pods never rolled out", nil, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}, nil, "", false},
		{"no lock", []runtime.Object{&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}}, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, nil, "", false},
		{"no such workload", nil, Ref{Kind: Deployment, Namespace: "ns", Name: "web"}, nil, "Deployment ns/web not found", true},
		{"unknown kind", nil, Ref{Kind: "CronJob", Namespace: "ns", Name: "web"}, nil, `unknown workload kind "CronJob"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			got, err := ReadLock(context.Background(), client, tt.ref)
			var inv *InvalidError
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.As(err, &inv) != tt.invalid {
					t.Fatalf("ReadLock = %+v, %v; want an error saying %q (bad input: %t)", got, err, tt.wantErr, tt.invalid)
				}
			} else if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReadLock = %+v, %v; want %+v", got, err, tt.want)
			}
			if n := len(client.Actions()); tt.ref.Kind != "CronJob" && n != 1 {
				t.Errorf("%d calls, want one GET: %v", n, client.Actions())
			}
		})
	}

	client := fake.NewClientset()
	failCalls(client, "get", "statefulsets", apierrors.NewInternalError(errors.New("etcd is down")))
	if _, err := ReadLock(context.Background(), client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}); err == nil ||
		!strings.HasPrefix(err.Error(), "reading the lock of StatefulSet ns/web: ") {
		t.Errorf("error %v, want the failed read, naming the workload", err)
	}
}

// TestParseLockNamesItsObject: a fault found in a lock names the object the annotation is on,
// the ConfigMap for label-selected pods.
func TestParseLockNamesItsObject(t *testing.T) {
	tests := []struct {
		ref  Ref
		want string
	}{
		{Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, "StatefulSet ns/web: annotation " + LockAnnotation + " is not valid JSON"},
		{Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}, "Pods ns/" + PodLockName("app=web") + ": annotation " + LockAnnotation + " is not valid JSON"},
	}
	for _, tt := range tests {
		l, err := ParseLock(tt.ref, "{")
		var le *LockError
		if l != nil || !errors.As(err, &le) || !le.JSON || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseLock(%v) = %+v, %v; want a *LockError saying %q", tt.ref, l, err, tt.want)
		}
		if l, err := ParseLock(tt.ref, ""); l != nil || err != nil {
			t.Errorf("ParseLock of no annotation = %+v, %v; want none", l, err)
		}
	}
}

// TestPodSelector: each kind selects the pods its own selector does; label-selected pods
// select by the selector given.
func TestPodSelector(t *testing.T) {
	pods := fake.NewClientset(runningPod("web-a", "reg/app:v1", nil, nil))
	ds, dep := newDaemonSet(), newDeployment()
	tests := []struct {
		name string
		w    Workload
	}{
		{"statefulset", mustLoad(t, fake.NewClientset(newStatefulSet()), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})},
		{"daemonset", mustLoad(t, fake.NewClientset(ds), Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"})},
		{"deployment", mustLoad(t, fake.NewClientset(dep, newReplicaSet("1", 3, "reg/app:v1", "dep-uid")), Ref{Kind: Deployment, Namespace: "ns", Name: "api"})},
		{"pods", mustLoad(t, pods, podsRef)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.PodSelector().String(); got != "app=web" {
				t.Errorf("PodSelector = %q, want app=web", got)
			}
		})
	}
}
