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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func TestLoadLeavesOutPodsThatCanNoLongerRun(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	client := fake.NewClientset(
		pod("web-running", corev1.PodRunning),
		pod("web-pending", corev1.PodPending),
		pod("web-evicted", corev1.PodFailed),
		pod("web-completed", corev1.PodSucceeded),
	)
	w, err := Load(context.Background(), client, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "web-pending" || names[1] != "web-running" {
		t.Errorf("pods %v, want [web-pending web-running]", names)
	}
}

func TestStatefulSetLeavesOutPodsBeingScaledAway(t *testing.T) {
	replicas := int32(2)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "sts-uid"},
		Spec:       appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	objects := []runtime.Object{sts}
	for _, name := range []string{"web-0", "web-1", "web-2", "web-3"} {
		objects = append(objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	w, err := Load(context.Background(), fake.NewClientset(objects...), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "web-1" || names[1] != "web-0" {
		t.Errorf("pods %v, want [web-1 web-0]: web-2 and web-3 are past the 2 replicas", names)
	}
}

func TestImagesCompareHoweverSpelled(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "docker.io/library/nginx:1.26"}}}}
	tmpl := &corev1.PodTemplateSpec{Spec: pod.Spec}
	tests := []struct {
		target string
		want   bool
	}{
		{"nginx:1.26", true},
		{"docker.io/library/nginx:1.26", true},
		{"nginx:1.27", false},
		{"nginx", false},
	}
	for _, tt := range tests {
		images := map[string]string{"web": tt.target}
		if got := RunsImages(pod, images); got != tt.want {
			t.Errorf("RunsImages(%s) = %v, want %v", tt.target, got, tt.want)
		}
		if got := TemplateHasImages(tmpl, images); got != tt.want {
			t.Errorf("TemplateHasImages(%s) = %v, want %v", tt.target, got, tt.want)
		}
	}
}

func TestLabelSelectedPodsThatCannotBeUpdatedAreRefused(t *testing.T) {
	owner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "api-5d8f", UID: "rs-uid", Controller: ptr.To(true)}}
	tests := []struct {
		name       string
		policy     corev1.RestartPolicy
		owners     []metav1.OwnerReference
		allowOwned bool
		want       string
	}{
		{"always", corev1.RestartPolicyAlways, nil, false, ""},
		{"default policy", "", nil, false, ""},
		{"never", corev1.RestartPolicyNever, nil, false, "pod ns/p: its restartPolicy is Never"},
		{"on failure", corev1.RestartPolicyOnFailure, nil, false, "pod ns/p: its restartPolicy is OnFailure"},
		{"owned", corev1.RestartPolicyAlways, owner, false, "pod ns/p is controlled by ReplicaSet/api-5d8f"},
		{"owned, allowed", corev1.RestartPolicyAlways, owner, true, ""},
		{"owned, not as controller", corev1.RestartPolicyAlways, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "c-uid"}}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "web"}, OwnerReferences: tt.owners},
				Spec:       corev1.PodSpec{RestartPolicy: tt.policy, Containers: []corev1.Container{{Name: "app", Image: "reg/app:v1"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning},
			}
			w, err := Load(context.Background(), fake.NewClientset(pod), Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"})
			if err != nil {
				t.Fatal(err)
			}
			err = w.CheckStart(Images(map[string]string{"app": "reg/app:v2"}), false)
			if err == nil {
				err = CheckOwned(w, tt.allowOwned)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
			var invalid *InvalidError
			if err != nil && !errors.As(err, &invalid) {
				t.Errorf("error %T, want *InvalidError (bad input, nothing written)", err)
			}
		})
	}
}

// podsRef is the label-selected pods app=web in ns.
var podsRef = Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}

// podsLockConfigMap is the lock ConfigMap of podsRef carrying lock, at resourceVersion 81.
func podsLockConfigMap(t *testing.T, lock *testLock) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PodLockName(podsRef.Selector), Namespace: "ns", ResourceVersion: "81",
		Annotations: map[string]string{"inplace-rollout.io/selector": podsRef.Selector}}}
	withLock(t, &cm.ObjectMeta, lock)
	return cm
}

// storedPodsLock is the lock the ConfigMap of podsRef holds, or nil when there is none.
func storedPodsLock(t *testing.T, client *fake.Clientset) *Lock {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps("ns").Get(context.Background(), PodLockName(podsRef.Selector), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if sel := cm.Annotations["inplace-rollout.io/selector"]; sel != podsRef.Selector {
		t.Errorf("lock ConfigMap names selector %q, want %q", sel, podsRef.Selector)
	}
	lock, err := parseLock(Pods, cm.Namespace, cm.Name, cm.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	return lock
}

func TestPodsLoadAndCheckStart(t *testing.T) {
	lock := recordedLock("Progressing", "reg/app:v2")
	client := fake.NewClientset(podsLockConfigMap(t, lock), runningPod("web-b", "reg/app:v1", nil, nil), runningPod("web-a", "reg/app:v1", nil, nil),
		runningPod("db-a", "reg/db:v1", map[string]string{"app": "db"}, nil))
	w := mustLoad(t, client, podsRef)
	if !reflect.DeepEqual(w.Lock(), lock.lock()) {
		t.Errorf("Lock() = %+v, want %+v", w.Lock(), lock)
	}
	if w.Replicas() != 2 || w.Template() != nil || w.Ref() != podsRef {
		t.Errorf("Replicas %d, Template %v, Ref %v; want 2, none, %v", w.Replicas(), w.Template(), w.Ref(), podsRef)
	}
	labels, ok, err := w.RevisionLabels(lock.change())
	if err != nil || !ok || labels == nil || len(labels) != 0 {
		t.Errorf("RevisionLabels = %v, %v, %v; want none needed, ok", labels, ok, err)
	}
	if !w.Counted(runningPod("x", "reg/app:v2", nil, nil), lock.change(), labels) || w.Counted(runningPod("x", "reg/app:v1", nil, nil), lock.change(), labels) {
		t.Errorf("Counted does not go by the images a pod runs")
	}

	empty := mustLoad(t, fake.NewClientset(), podsRef)
	checkStartError(t, empty.CheckStart(lock.change(), false), `no pods match pods in ns matching "app=web"`, false)
	if empty.Lock() != nil {
		t.Errorf("Lock() = %+v without a ConfigMap", empty.Lock())
	}
	checkStartError(t, w.CheckStart(Images(map[string]string{"db": "reg/db:v2"}), false), `pod ns/web-a: no container named "db"`, false)
}

func TestPodsWrites(t *testing.T) {
	withoutStrategy := func(l *testLock) *testLock { l.PreviousStrategy = nil; return l }
	tests := []struct {
		name     string
		onObject *testLock // the lock the ConfigMap holds, nil for no ConfigMap
		op       workloadOp
		lock     *testLock
		wantVerb string // create, update, or "" for no write
		wantDone bool
		wantLock *testLock // the lock stored after
	}{
		{"start creates the lock", nil, opStart, withoutStrategy(recordedLock("Progressing", "reg/app:v2")), "create", true, withoutStrategy(recordedLock("Progressing", "reg/app:v2"))},
		{"start of a rollback keeps what the lock recorded", recordedLock("Succeeded", "reg/app:v2"), opStart, recordedLock("RollingBack", "reg/app:v2"), "update", true, recordedLock("RollingBack", "reg/app:v2")},
		{"retarget", recordedLock("Progressing", "reg/app:v2"), opRetarget, recordedLock("Progressing", "reg/app:v3"), "update", true, recordedLock("Progressing", "reg/app:v3")},
		{"set lock", recordedLock("Progressing", "reg/app:v2"), opSetLock, recordedLock("Paused", "reg/app:v2"), "update", true, recordedLock("Paused", "reg/app:v2")},
		{"finalize", recordedLock("Progressing", "reg/app:v2"), opFinalize, recordedLock("Succeeded", "reg/app:v2"), "update", true, recordedLock("Succeeded", "reg/app:v2")},
		{"restore", recordedLock("RollingBack", "reg/app:v2"), opRestore, recordedLock("RolledBack", "reg/app:v2"), "update", true, recordedLock("RolledBack", "reg/app:v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []runtime.Object{runningPod("web-b", "reg/app:v0", nil, nil), runningPod("web-a", "reg/app:v1", nil, nil)}
			if tt.onObject != nil {
				objects = append(objects, podsLockConfigMap(t, tt.onObject))
			}
			client := fake.NewClientset(objects...)
			w := mustLoad(t, client, podsRef)
			client.ClearActions()
			done, err := tt.op(context.Background(), w, tt.lock)
			if err != nil || done != tt.wantDone {
				t.Fatalf("done %v, error %v; want %v, none", done, err, tt.wantDone)
			}
			var verbs []string
			for _, a := range client.Actions() {
				switch a.GetVerb() {
				case "create":
					verbs = append(verbs, "create")
				case "update":
					verbs = append(verbs, "update")
					if rv := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).ResourceVersion; rv != "81" {
						t.Errorf("update carries resourceVersion %q, want 81, the version observed", rv)
					}
				case "delete", "patch":
					t.Errorf("wrote %v", a)
				}
			}
			if want := []string{tt.wantVerb}; tt.wantVerb == "" && len(verbs) != 0 || tt.wantVerb != "" && !reflect.DeepEqual(verbs, want) {
				t.Errorf("writes %v, want %q", verbs, tt.wantVerb)
			}
			if got := storedPodsLock(t, client); !reflect.DeepEqual(got, tt.wantLock.lock()) {
				t.Errorf("stored lock %+v\nwant %+v", got, tt.wantLock)
			}
		})
	}
}

func TestPodsWriteErrors(t *testing.T) {
	pod := runningPod("web-a", "reg/app:v1", nil, nil)
	tests := []struct {
		name string
		cm   bool
		verb string
		err  error
		op   workloadOp
	}{
		{"create", false, "create", apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, PodLockName(podsRef.Selector)), opStart},
		{"update on start", true, "update", conflict("configmaps", "x"), opStart},
		{"set lock", true, "update", conflict("configmaps", "x"), opSetLock},
		{"finalize", true, "update", conflict("configmaps", "x"), opFinalize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []runtime.Object{pod}
			if tt.cm {
				objects = append(objects, podsLockConfigMap(t, recordedLock("Progressing", "reg/app:v2")))
			}
			client := fake.NewClientset(objects...)
			w := mustLoad(t, client, podsRef)
			failCalls(client, tt.verb, "configmaps", tt.err)
			done, err := tt.op(context.Background(), w, recordedLock("Progressing", "reg/app:v3"))
			if done {
				t.Errorf("done despite the failed write")
			}
			if !errors.Is(err, tt.err) || !strings.HasPrefix(err.Error(), `writing the lock of pods in ns matching "app=web": `) {
				t.Errorf("error %v, want %v wrapped naming the pods", err, tt.err)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "configmaps" {
					t.Errorf("collected other locks after a failed write")
				}
			}
		})
	}
}

func TestPodsPrevious(t *testing.T) {
	pod := func(name, app, init string) *corev1.Pod {
		p := runningPod(name, app, nil, nil)
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: init}}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "reg/side:v1"})
		return p
	}
	tests := []struct {
		name   string
		images map[string]string
		want   map[string]string
	}{
		{"a container", map[string]string{"app": "reg/app:v2"}, map[string]string{"app": "reg/app:v1"}},
		{"two containers", map[string]string{"app": "reg/app:v2", "sidecar": "reg/side:v2"}, map[string]string{"app": "reg/app:v1", "sidecar": "reg/side:v1"}},
		// Like a workload's template images, so that status and a rollback of the finished
		// rollout know what the init container ran.
		{"an init container", map[string]string{"init": "reg/init:v2", "app": "reg/app:v2"}, map[string]string{"init": "reg/init:v1", "app": "reg/app:v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The first pod by name is the one recorded.
			client := fake.NewClientset(pod("web-b", "reg/app:v0", "reg/init:v0"), pod("web-a", "reg/app:v1", "reg/init:v1"))
			w := mustLoad(t, client, podsRef)
			prev, strategy := w.Previous(Images(tt.images))
			if images := prev.Images; !reflect.DeepEqual(images, tt.want) || prev.Resources != nil || strategy != nil {
				t.Errorf("Previous = %v, %s; want %v and no strategy", images, strategy, tt.want)
			}
		})
	}
}
