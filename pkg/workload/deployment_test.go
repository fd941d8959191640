package workload

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// newDeployment is Deployment ns/api with 3 replicas, observed by its controller.
func newDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "ns", UID: "dep-uid", Generation: 2, ResourceVersion: "61"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), Selector: webSelector(), Template: webTemplate("reg/app:v1")},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 2},
	}
}

// newReplicaSet is a ReplicaSet of Deployment ns/api (owner dep-uid) running image for app.
func newReplicaSet(hash string, replicas int32, image string, owner types.UID) *appsv1.ReplicaSet {
	tmpl := webTemplate(image)
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "api-" + hash, Namespace: "ns", UID: types.UID("rs-" + hash), ResourceVersion: "71",
			Labels: map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash}, OwnerReferences: controlledBy("Deployment", "api", owner)},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Template: tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash}}},
	}
}

func rsPod(name, hash string) *corev1.Pod {
	return runningPod(name, "reg/app:v1", map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}, controlledBy("ReplicaSet", "api-"+hash, types.UID("rs-"+hash)))
}

func loadDeploymentWith(t *testing.T, dep *appsv1.Deployment, objects ...runtime.Object) (*fake.Clientset, Workload) {
	t.Helper()
	client := fake.NewClientset(append(objects, dep)...)
	return client, mustLoad(t, client, Ref{Kind: Deployment, Namespace: "ns", Name: "api"})
}

func TestDeploymentLoad(t *testing.T) {
	dep := newDeployment()
	dep.Spec.Replicas = nil
	_, w := loadDeploymentWith(t, dep,
		newReplicaSet("new", 1, "reg/app:v1", "dep-uid"), rsPod("api-new-b", "new"), rsPod("api-new-a", "new"),
		newReplicaSet("old", 0, "reg/app:v0", "dep-uid"), rsPod("api-old-a", "old"),
		newReplicaSet("foreign", 2, "reg/app:v1", "other-uid"), rsPod("api-foreign-a", "foreign"),
	)
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"api-new-a", "api-new-b"}) {
		t.Errorf("pods %v, want those of the one owned ReplicaSet with replicas", names)
	}
	if w.Replicas() != 1 {
		t.Errorf("Replicas() = %d, want 1 when unset", w.Replicas())
	}
	if w.Ref() != (Ref{Kind: Deployment, Namespace: "ns", Name: "api"}) || w.Lock() != nil || w.Template().Spec.Containers[0].Image != "reg/app:v1" {
		t.Errorf("Ref %v, Lock %v, Template %v", w.Ref(), w.Lock(), w.Template())
	}
	if _, w = loadDeploymentWith(t, newDeployment()); w.Replicas() != 3 {
		t.Errorf("Replicas() = %d, want 3", w.Replicas())
	}
}

func TestDeploymentCheckStart(t *testing.T) {
	images := map[string]string{"app": "reg/app:v2"}
	current := newReplicaSet("1", 3, "reg/app:v1", "dep-uid")
	tests := []struct {
		name     string
		modify   func(*appsv1.Deployment)
		objects  []runtime.Object
		images   map[string]string
		want     string
		notReady bool
	}{
		{"one ReplicaSet at the template", nil, []runtime.Object{current}, images, "", false},
		{"an old ReplicaSet scaled to zero", nil, []runtime.Object{current, newReplicaSet("0", 0, "reg/app:v0", "dep-uid")}, images, "", false},
		{"unknown container", nil, []runtime.Object{current}, map[string]string{"db": "reg/db:v2"}, `Deployment ns/api: no container named "db"`, false},
		{"generation not observed", func(d *appsv1.Deployment) { d.Generation = 3 }, []runtime.Object{current}, images,
			"Deployment ns/api: the Deployment controller has not observed generation 3 yet", true},
		{"two ReplicaSets with replicas", nil, []runtime.Object{current, newReplicaSet("0", 1, "reg/app:v0", "dep-uid")}, images,
			"Deployment ns/api has 2 ReplicaSets with replicas, want exactly 1: a rollout of its own is in progress; finish it first", false},
		{"no ReplicaSet with replicas", nil, []runtime.Object{newReplicaSet("0", 0, "reg/app:v0", "dep-uid")}, images,
			"Deployment ns/api has 0 ReplicaSets with replicas, want exactly 1", false},
		{"ReplicaSet at another template", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[1].Image = "reg/side:v2" }, []runtime.Object{current}, images,
			"Deployment ns/api has an unfinished rollout: ReplicaSet api-1 does not run the Deployment's template; finish or undo it first", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := newDeployment()
			if tt.modify != nil {
				tt.modify(dep)
			}
			_, w := loadDeploymentWith(t, dep, tt.objects...)
			checkStartError(t, w.CheckStart(Images(tt.images), false), tt.want, tt.notReady)
		})
	}
}

func TestDeploymentRevisionLabelsAndCounted(t *testing.T) {
	_, w := loadDeploymentWith(t, newDeployment())
	labels, ok, err := w.RevisionLabels(Images(map[string]string{"app": "reg/app:v2"}))
	if err != nil || !ok || len(labels) != 0 || labels == nil {
		t.Errorf("RevisionLabels = %v, %v, %v; want none needed, ok", labels, ok, err)
	}
	target := map[string]string{"app": "reg/app:v2"}
	if !w.Counted(runningPod("a", "reg/app:v2", nil, nil), Images(target), labels) {
		t.Errorf("a pod on the target images is not counted")
	}
	if w.Counted(runningPod("a", "reg/app:v1", nil, nil), Images(target), labels) {
		t.Errorf("a pod on the old images is counted")
	}
}

// depLock is the lock of a rollout of Deployment ns/api from reg/app:v1 to image.
func depLock(phase, image string) *testLock {
	l := recordedLock(phase, image)
	l.PreviousStrategy = json.RawMessage(`{"paused":false}`)
	return l
}

func TestDeploymentWrites(t *testing.T) {
	const (
		depV1 = `{"paused":false,"template":{"spec":{"containers":[{"image":"reg/app:v1","name":"app"}]}}}`
		depV2 = `{"paused":false,"template":{"spec":{"containers":[{"image":"reg/app:v2","name":"app"}]}}}`
		depAs = `{"paused":false,"template":{"spec":{}}}`
		rsV1  = `{"template":{"spec":{"containers":[{"image":"reg/app:v1","name":"app"}]}}}`
		rsV2  = `{"template":{"spec":{"containers":[{"image":"reg/app:v2","name":"app"}]}}}`
	)
	pausedLock := depLock("Progressing", "reg/app:v2")
	pausedLock.PreviousStrategy = json.RawMessage(`{"paused":true}`)
	tests := []struct {
		name     string
		onObject *testLock
		paused   bool
		depImage string // the Deployment template's app image
		rsImage  string // its ReplicaSet's
		op       workloadOp
		lock     *testLock
		wantDone bool
		// wantResource is what the one write patches: deployments (precondition 61), replicasets (71), or "" for none.
		wantResource string
		wantSpec     string
		wantLock     *testLock
		wantErr      string
		// wantDep, wantRS and wantPaused are the stored Deployment's and ReplicaSet's app
		// images and whether the Deployment is paused, after the call.
		wantDep, wantRS string
		wantPaused      bool
	}{
		{
			name: "start records the images and pauses", depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opStart,
			lock:     depLock("Progressing", "reg/app:v2"),
			wantDone: true, wantResource: "deployments", wantSpec: `{"paused":true}`, wantLock: depLock("Progressing", "reg/app:v2"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: true,
		},
		{
			name: "start of a paused Deployment records that it was paused", paused: true, depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opStart,
			lock:     pausedLock,
			wantDone: true, wantResource: "deployments", wantSpec: `{"paused":true}`, wantLock: pausedLock,
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: true,
		},
		{
			name: "start of a rollback keeps what the lock recorded", onObject: depLock("Succeeded", "reg/app:v2"), depImage: "reg/app:v2", rsImage: "reg/app:v2", op: opStart,
			lock: depLock("RollingBack", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: `{"paused":true}`, wantLock: depLock("RollingBack", "reg/app:v2"),
			wantDep: "reg/app:v2", wantRS: "reg/app:v2", wantPaused: true,
		},
		{
			name: "retarget writes the lock alone", onObject: depLock("Progressing", "reg/app:v2"), depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opRetarget,
			lock: depLock("Progressing", "reg/app:v3"), wantDone: true, wantResource: "deployments", wantLock: depLock("Progressing", "reg/app:v3"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: true,
		},
		{
			name: "set lock", onObject: depLock("Progressing", "reg/app:v2"), depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opSetLock,
			lock: depLock("Paused", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantLock: depLock("Paused", "reg/app:v2"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: true,
		},
		{
			name: "finalize patches the ReplicaSet first", onObject: depLock("Progressing", "reg/app:v2"), depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opFinalize,
			lock: depLock("Progressing", "reg/app:v2"), wantDone: false, wantResource: "replicasets", wantSpec: rsV2,
			wantDep: "reg/app:v1", wantRS: "reg/app:v2", wantPaused: true,
		},
		{
			name: "finalize then sets the Deployment's template, unpauses and marks the lock succeeded", onObject: depLock("Progressing", "reg/app:v2"),
			depImage: "reg/app:v1", rsImage: "reg/app:v2", op: opFinalize,
			lock: depLock("Succeeded", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: depV2, wantLock: depLock("Succeeded", "reg/app:v2"),
			wantDep: "reg/app:v2", wantRS: "reg/app:v2", wantPaused: false,
		},
		{
			name: "restore of an unfinished rollout unpauses", onObject: depLock("RollingBack", "reg/app:v2"), depImage: "reg/app:v1", rsImage: "reg/app:v1", op: opRestore,
			lock: depLock("RolledBack", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: depAs, wantLock: depLock("RolledBack", "reg/app:v2"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: false,
		},
		{
			name: "restore of a finished rollout patches the ReplicaSet back first", onObject: depLock("RollingBack", "reg/app:v2"), depImage: "reg/app:v2", rsImage: "reg/app:v2", op: opRestore,
			lock: depLock("RollingBack", "reg/app:v2"), wantDone: false, wantResource: "replicasets", wantSpec: rsV1,
			wantDep: "reg/app:v2", wantRS: "reg/app:v1", wantPaused: true,
		},
		{
			name: "restore of a finished rollout then puts the Deployment's template back", onObject: depLock("RollingBack", "reg/app:v2"), depImage: "reg/app:v2", rsImage: "reg/app:v1", op: opRestore,
			lock: depLock("RolledBack", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: depV1, wantLock: depLock("RolledBack", "reg/app:v2"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: false,
		},
		{
			name: "restore keeps a template someone else changed", onObject: depLock("RollingBack", "reg/app:v2"), depImage: "reg/app:v3", rsImage: "reg/app:v1", op: opRestore,
			lock: depLock("RolledBack", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: depAs, wantLock: depLock("RolledBack", "reg/app:v2"),
			wantDep: "reg/app:v3", wantRS: "reg/app:v1", wantPaused: false,
		},
		{
			name: "restore asked to replace someone else's template", onObject: depLock("RollingBack", "reg/app:v2"), depImage: "reg/app:v3", rsImage: "reg/app:v1", op: opRestoreForeign,
			lock: depLock("RolledBack", "reg/app:v2"), wantDone: true, wantResource: "deployments", wantSpec: depV1, wantLock: depLock("RolledBack", "reg/app:v2"),
			wantDep: "reg/app:v1", wantRS: "reg/app:v1", wantPaused: false,
		},
		{
			name: "a lock without a recorded strategy is refused", onObject: &testLock{Holder: "cli", Phase: "Progressing", Images: map[string]string{"app": "reg/app:v2"}}, depImage: "reg/app:v1", rsImage: "reg/app:v2", op: opFinalize,
			lock:    recordedLock("Succeeded", "reg/app:v2"),
			wantErr: "decoding the recorded strategy of Deployment ns/api: unexpected end of JSON input",
			wantDep: "reg/app:v1", wantRS: "reg/app:v2", wantPaused: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := newDeployment()
			// A Deployment a rollout holds is paused.
			dep.Spec.Paused = tt.paused || (tt.onObject != nil && tt.onObject.Phase != "Succeeded" && tt.onObject.Phase != "RolledBack")
			dep.Spec.Template.Spec.Containers[0].Image = tt.depImage
			if tt.onObject != nil {
				withLock(t, &dep.ObjectMeta, tt.onObject)
			}
			rs := newReplicaSet("1", 3, tt.rsImage, "dep-uid")
			client, w := loadDeploymentWith(t, dep, rs)
			client.ClearActions()
			done, err := tt.op(context.Background(), w, tt.lock)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one saying %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if done != tt.wantDone {
				t.Errorf("done = %v, want %v", done, tt.wantDone)
			}
			switch tt.wantResource {
			case "":
				checkObjectPatch(t, client, "", "", "", "", nil)
			case "deployments":
				checkObjectPatch(t, client, "deployments", "api", "61", tt.wantSpec, tt.wantLock)
			case "replicasets":
				checkObjectPatch(t, client, "replicasets", "api-1", "71", tt.wantSpec, tt.wantLock)
			}
			storedRS, err := client.AppsV1().ReplicaSets("ns").Get(context.Background(), "api-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			storedDep, err := client.AppsV1().Deployments("ns").Get(context.Background(), "api", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if img := storedDep.Spec.Template.Spec.Containers[0].Image; img != tt.wantDep {
				t.Errorf("Deployment template runs %s, want %s", img, tt.wantDep)
			}
			if img := storedRS.Spec.Template.Spec.Containers[0].Image; img != tt.wantRS {
				t.Errorf("ReplicaSet template runs %s, want %s", img, tt.wantRS)
			}
			if storedDep.Spec.Paused != tt.wantPaused {
				t.Errorf("Deployment paused = %v, want %v", storedDep.Spec.Paused, tt.wantPaused)
			}
		})
	}
}

func TestDeploymentWriteErrors(t *testing.T) {
	tests := []struct {
		name    string
		extra   []runtime.Object
		rsImage string
		fail    string // resource whose patches conflict
		op      workloadOp
		want    string
		invalid bool
	}{
		{"Deployment conflict", nil, "reg/app:v1", "deployments", opSetLock, "writing Deployment ns/api: ", false},
		{"Deployment conflict on start", nil, "reg/app:v1", "deployments", opStart, "writing Deployment ns/api: ", false},
		{"Deployment conflict on hand back", nil, "reg/app:v2", "deployments", opFinalize, "writing Deployment ns/api: ", false},
		{"ReplicaSet conflict", nil, "reg/app:v1", "replicasets", opFinalize, "writing ReplicaSet ns/api-1: ", false},
		{"a rollout of the Deployment's own", []runtime.Object{newReplicaSet("2", 1, "reg/app:v3", "dep-uid")}, "reg/app:v1", "", opRestore,
			"Deployment ns/api has 2 ReplicaSets with replicas, want exactly 1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := newDeployment()
			withLock(t, &dep.ObjectMeta, depLock("Progressing", "reg/app:v2"))
			client, w := loadDeploymentWith(t, dep, append(tt.extra, newReplicaSet("1", 3, tt.rsImage, "dep-uid"))...)
			if tt.fail != "" {
				failCalls(client, "patch", tt.fail, conflict(tt.fail, "x"))
			}
			client.ClearActions()
			done, err := tt.op(context.Background(), w, depLock("Progressing", "reg/app:v2"))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want one starting %q", err, tt.want)
			}
			if done && tt.fail == "replicasets" {
				t.Errorf("done despite the failed write")
			}
			if tt.fail != "" && !apierrors.IsConflict(err) {
				t.Errorf("error %v does not wrap the conflict", err)
			}
			var invalid *InvalidError
			if errors.As(err, &invalid) != tt.invalid {
				t.Errorf("error %T: InvalidError %v, want %v", err, !tt.invalid, tt.invalid)
			}
			if tt.invalid && writes(client) != 0 {
				t.Errorf("wrote %v on bad input", client.Actions())
			}
		})
	}
}
