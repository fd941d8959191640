package workload

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const stsStrategy = `{"type":"RollingUpdate","rollingUpdate":{"partition":1}}`

// recordedLock is the lock of a rollout from reg/app:v1 to images that has started.
func recordedLock(phase, image string) *testLock {
	return &testLock{
		Holder: "cli", RolloutID: "r-1", Phase: phase,
		Images:           map[string]string{"app": image},
		PreviousImages:   map[string]string{"app": "reg/app:v1"},
		PreviousStrategy: json.RawMessage(stsStrategy),
		StartedAt:        time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

// workloadOp is one of a Workload's writes. Its bool is Finalize's and Restore's done; for the
// others, whether the write succeeded.
type workloadOp func(ctx context.Context, w Workload, lock *testLock) (bool, error)

func opStart(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	err := w.Start(ctx, lock.encode(), lock.change())
	return err == nil, err
}
func opRetarget(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	err := w.Retarget(ctx, lock.encode(), lock.change())
	return err == nil, err
}
func opSetLock(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	err := w.SetLock(ctx, lock.encode())
	return err == nil, err
}
func opFinalize(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	return w.Finalize(ctx, lock.encode(), lock.change())
}
func opRestore(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	return w.Restore(ctx, lock.encode(), lock.change(), false)
}
func opRestoreForeign(ctx context.Context, w Workload, lock *testLock) (bool, error) {
	return w.Restore(ctx, lock.encode(), lock.change(), true)
}

func TestStatefulSetWrites(t *testing.T) {
	tests := []struct {
		name     string
		onObject *testLock // the lock the StatefulSet carries when loaded
		template string    // the template's app image when loaded
		op       workloadOp
		lock     *testLock // the lock passed to op
		wantDone bool
		// wantSpec is the patch's spec; wantLock the lock it writes; "" and nil for no write.
		wantSpec string
		wantLock *testLock
		wantErr  string
		// after checks the StatefulSet as stored after the write.
		after func(t *testing.T, sts *appsv1.StatefulSet)
	}{
		{
			name: "start records the previous images and strategy, freezes and sets the template", template: "reg/app:v1", op: opStart,
			lock:     recordedLock("Progressing", "reg/app:v2"),
			wantDone: true,
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v2","name":"app"}]}},"updateStrategy":{"rollingUpdate":null,"type":"OnDelete"}}`,
			wantLock: recordedLock("Progressing", "reg/app:v2"),
			after: func(t *testing.T, sts *appsv1.StatefulSet) {
				t.Helper()
				if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Spec.UpdateStrategy.RollingUpdate != nil {
					t.Errorf("strategy %+v, want OnDelete without rollingUpdate", sts.Spec.UpdateStrategy)
				}
				if img := sts.Spec.Template.Spec.Containers[0].Image; img != "reg/app:v2" {
					t.Errorf("template image %s, want reg/app:v2", img)
				}
				if img := sts.Spec.Template.Spec.Containers[1].Image; img != "reg/side:v1" {
					t.Errorf("sidecar image %s, want it untouched", img)
				}
			},
		},
		{
			name: "start of a rollback keeps the recorded previous images and strategy", onObject: recordedLock("Succeeded", "reg/app:v2"), template: "reg/app:v2", op: opStart,
			lock:     recordedLock("RollingBack", "reg/app:v2"),
			wantDone: true,
			wantSpec: `{"template":{"spec":{}},"updateStrategy":{"rollingUpdate":null,"type":"OnDelete"}}`,
			wantLock: recordedLock("RollingBack", "reg/app:v2"),
		},
		{
			name: "retarget writes the new images and lock, not the strategy", onObject: recordedLock("Progressing", "reg/app:v2"), template: "reg/app:v2", op: opRetarget,
			lock: recordedLock("Progressing", "reg/app:v3"), wantDone: true,
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v3","name":"app"}]}}}`,
			wantLock: recordedLock("Progressing", "reg/app:v3"),
		},
		{
			name: "set lock writes the lock alone", onObject: recordedLock("Progressing", "reg/app:v2"), template: "reg/app:v2", op: opSetLock,
			lock: recordedLock("Paused", "reg/app:v2"), wantDone: true,
			wantLock: recordedLock("Paused", "reg/app:v2"),
		},
		{
			name: "finalize restores the strategy and marks the lock succeeded", onObject: recordedLock("Progressing", "reg/app:v2"), template: "reg/app:v2", op: opFinalize,
			lock: recordedLock("Succeeded", "reg/app:v2"), wantDone: true,
			wantSpec: `{"template":{"spec":{}},"updateStrategy":{"rollingUpdate":{"partition":1},"type":"RollingUpdate"}}`,
			wantLock: recordedLock("Succeeded", "reg/app:v2"),
			after: func(t *testing.T, sts *appsv1.StatefulSet) {
				t.Helper()
				s := sts.Spec.UpdateStrategy
				if s.Type != appsv1.RollingUpdateStatefulSetStrategyType || s.RollingUpdate == nil || ptr.Deref(s.RollingUpdate.Partition, -1) != 1 {
					t.Errorf("strategy %+v, want RollingUpdate with partition 1", s)
				}
			},
		},
		{
			name: "restore puts back the previous images", onObject: recordedLock("RollingBack", "reg/app:v2"), template: "reg/app:v2", op: opRestore,
			lock: recordedLock("RolledBack", "reg/app:v2"), wantDone: true,
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v1","name":"app"}]}},"updateStrategy":{"rollingUpdate":{"partition":1},"type":"RollingUpdate"}}`,
			wantLock: recordedLock("RolledBack", "reg/app:v2"),
			after: func(t *testing.T, sts *appsv1.StatefulSet) {
				t.Helper()
				if img := sts.Spec.Template.Spec.Containers[0].Image; img != "reg/app:v1" {
					t.Errorf("template image %s, want reg/app:v1", img)
				}
			},
		},
		{
			name: "restore keeps a template someone else changed", onObject: recordedLock("RollingBack", "reg/app:v2"), template: "reg/app:v3", op: opRestore,
			lock: recordedLock("RolledBack", "reg/app:v2"), wantDone: true,
			wantSpec: `{"template":{"spec":{}},"updateStrategy":{"rollingUpdate":{"partition":1},"type":"RollingUpdate"}}`,
			wantLock: recordedLock("RolledBack", "reg/app:v2"),
			after: func(t *testing.T, sts *appsv1.StatefulSet) {
				t.Helper()
				if img := sts.Spec.Template.Spec.Containers[0].Image; img != "reg/app:v3" {
					t.Errorf("template image %s, want someone else's reg/app:v3 kept", img)
				}
			},
		},
		{
			name: "restore asked to replace someone else's template", onObject: recordedLock("RollingBack", "reg/app:v2"), template: "reg/app:v3", op: opRestoreForeign,
			lock: recordedLock("RolledBack", "reg/app:v2"), wantDone: true,
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v1","name":"app"}]}},"updateStrategy":{"rollingUpdate":{"partition":1},"type":"RollingUpdate"}}`,
			wantLock: recordedLock("RolledBack", "reg/app:v2"),
		},
		{
			name: "a lock without a recorded strategy is refused", onObject: &testLock{Holder: "cli", Phase: "Progressing", Images: map[string]string{"app": "reg/app:v2"}}, template: "reg/app:v2", op: opFinalize,
			lock:    recordedLock("Succeeded", "reg/app:v2"),
			wantErr: "decoding the recorded update strategy: unexpected end of JSON input",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := newStatefulSet()
			sts.Spec.Template.Spec.Containers[0].Image = tt.template
			if tt.onObject != nil {
				withLock(t, &sts.ObjectMeta, tt.onObject)
			}
			client := fake.NewClientset(sts)
			w := mustLoad(t, client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
			if !reflect.DeepEqual(w.Lock(), tt.onObject.lock()) {
				t.Fatalf("loaded lock %+v, want %+v", w.Lock(), tt.onObject)
			}
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
			checkObjectPatch(t, client, "statefulsets", "web", "41", tt.wantSpec, tt.wantLock)
			stored, err := client.AppsV1().StatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantLock != nil {
				got, err := parseLock(StatefulSet, "ns", "web", stored.Annotations)
				if err != nil || !reflect.DeepEqual(got, tt.wantLock.lock()) {
					t.Errorf("stored lock %+v, %v; want %+v", got, err, tt.wantLock)
				}
			}
			if tt.after != nil {
				tt.after(t, stored)
			}
		})
	}
}

// checkObjectPatch checks that the client received exactly one patch, of resource/name, with
// the resourceVersion precondition rv, the spec wantSpec and the lock wantLock; or none when
// both are empty.
func checkObjectPatch(t *testing.T, client *fake.Clientset, resource, name, rv, wantSpec string, wantLock *testLock) {
	t.Helper()
	ps := patches(t, client)
	if wantSpec == "" && wantLock == nil {
		if writes(client) != 0 {
			t.Errorf("wrote %v, want nothing", client.Actions())
		}
		return
	}
	if len(ps) != 1 || writes(client) != 1 {
		t.Fatalf("%d patches, %d writes; want one patch", len(ps), writes(client))
	}
	p := ps[0]
	if p.resource != resource || p.name != name {
		t.Errorf("patched %s %s, want %s %s", p.resource, p.name, resource, name)
	}
	switch {
	case p.tests != nil:
		// The fake client applies the patch: the values it tests are those of the object.
		if _, ok := p.tests["/metadata/generation"]; !ok || p.tests[lockPath] == nil {
			t.Errorf("JSON patch tests %v; want the generation and the lock observed", p.tests)
		}
	case p.resourceVersion() != rv:
		t.Errorf("patch precondition resourceVersion %q, want %q, the version observed", p.resourceVersion(), rv)
	}
	if got := p.spec(t); got != wantSpec {
		t.Errorf("patch spec %s\nwant %s", got, wantSpec)
	}
	if got := p.lock(t); !reflect.DeepEqual(got, wantLock.lock()) {
		t.Errorf("patch lock %+v\nwant %+v", got, wantLock)
	}
}

func TestStatefulSetWriteConflict(t *testing.T) {
	ops := []struct {
		name string
		op   workloadOp
	}{
		{"start", opStart}, {"retarget", opRetarget}, {"set lock", opSetLock}, {"finalize", opFinalize}, {"restore", opRestore},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			sts := newStatefulSet()
			withLock(t, &sts.ObjectMeta, recordedLock("Progressing", "reg/app:v2"))
			client := fake.NewClientset(sts)
			w := mustLoad(t, client, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
			failCalls(client, "patch", "statefulsets", conflict("statefulsets", "web"))
			_, err := tt.op(context.Background(), w, recordedLock("Progressing", "reg/app:v3"))
			if !apierrors.IsConflict(err) || !strings.HasPrefix(err.Error(), "writing StatefulSet ns/web: ") {
				t.Errorf("error %v, want the conflict, wrapped naming the StatefulSet", err)
			}
			stored, _ := client.AppsV1().StatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
			if !reflect.DeepEqual(stored, sts) {
				t.Errorf("StatefulSet changed despite the conflict")
			}
		})
	}
}

func TestDaemonSetWrites(t *testing.T) {
	strategy := appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(2))}}
	const recorded = `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":2}}`
	lock := func(phase string) *testLock {
		l := recordedLock(phase, "reg/app:v2")
		l.PreviousStrategy = json.RawMessage(recorded)
		return l
	}
	tests := []struct {
		name     string
		onObject *testLock
		template string
		op       workloadOp
		lock     *testLock
		wantSpec string
		wantLock *testLock
		after    func(t *testing.T, ds *appsv1.DaemonSet)
	}{
		{
			name: "start", template: "reg/app:v1", op: opStart,
			lock:     lock("Progressing"),
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v2","name":"app"}]}},"updateStrategy":{"rollingUpdate":null,"type":"OnDelete"}}`,
			wantLock: lock("Progressing"),
			after: func(t *testing.T, ds *appsv1.DaemonSet) {
				t.Helper()
				if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate != nil {
					t.Errorf("strategy %+v, want OnDelete", ds.Spec.UpdateStrategy)
				}
			},
		},
		{
			name: "restore", onObject: lock("RollingBack"), template: "reg/app:v2", op: opRestore, lock: lock("RolledBack"),
			wantSpec: `{"template":{"spec":{"containers":[{"image":"reg/app:v1","name":"app"}]}},"updateStrategy":{"rollingUpdate":{"maxUnavailable":2},"type":"RollingUpdate"}}`,
			wantLock: lock("RolledBack"),
			after: func(t *testing.T, ds *appsv1.DaemonSet) {
				t.Helper()
				if !reflect.DeepEqual(ds.Spec.UpdateStrategy, strategy) {
					t.Errorf("strategy %+v, want %+v", ds.Spec.UpdateStrategy, strategy)
				}
				if img := ds.Spec.Template.Spec.Containers[0].Image; img != "reg/app:v1" {
					t.Errorf("template image %s, want reg/app:v1", img)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDaemonSet()
			ds.Spec.UpdateStrategy = strategy
			ds.Spec.Template.Spec.Containers[0].Image = tt.template
			if tt.onObject != nil {
				withLock(t, &ds.ObjectMeta, tt.onObject)
			}
			client := fake.NewClientset(ds)
			w := mustLoad(t, client, Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"})
			client.ClearActions()
			if _, err := tt.op(context.Background(), w, tt.lock); err != nil {
				t.Fatal(err)
			}
			checkObjectPatch(t, client, "daemonsets", "agent", "51", tt.wantSpec, tt.wantLock)
			stored, err := client.AppsV1().DaemonSets("ns").Get(context.Background(), "agent", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tt.after(t, stored)
		})
	}

	ds := newDaemonSet()
	client := fake.NewClientset(ds)
	w := mustLoad(t, client, Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"})
	failCalls(client, "patch", "daemonsets", conflict("daemonsets", "agent"))
	if err := w.SetLock(context.Background(), lock("Paused").encode()); !apierrors.IsConflict(err) || !strings.HasPrefix(err.Error(), "writing DaemonSet ns/agent: ") {
		t.Errorf("error %v, want the conflict, wrapped naming the DaemonSet", err)
	}
}

// TestPrevious: what a rollout records to hand each kind of workload back, its template's images
// of the rollout's containers and its strategy, as Finalize and Restore read them back.
func TestPrevious(t *testing.T) {
	paused := newDeployment()
	paused.Spec.Paused = true
	ds := newDaemonSet()
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(2))}}
	tests := []struct {
		name         string
		ref          Ref
		object       runtime.Object
		images       map[string]string
		wantImages   map[string]string
		wantStrategy string
	}{
		{"statefulset", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, newStatefulSet(), map[string]string{"app": "reg/app:v2"},
			map[string]string{"app": "reg/app:v1"}, stsStrategy},
		{"statefulset, two containers", Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}, newStatefulSet(), map[string]string{"app": "x", "sidecar": "y"},
			map[string]string{"app": "reg/app:v1", "sidecar": "reg/side:v1"}, stsStrategy},
		{"daemonset", Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}, ds, map[string]string{"app": "reg/app:v2"},
			map[string]string{"app": "reg/app:v1"}, `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":2}}`},
		{"deployment", Ref{Kind: Deployment, Namespace: "ns", Name: "api"}, newDeployment(), map[string]string{"app": "reg/app:v2"},
			map[string]string{"app": "reg/app:v1"}, `{"paused":false}`},
		{"paused deployment", Ref{Kind: Deployment, Namespace: "ns", Name: "api"}, paused, map[string]string{"app": "reg/app:v2"},
			map[string]string{"app": "reg/app:v1"}, `{"paused":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []runtime.Object{tt.object}
			if tt.ref.Kind == Deployment {
				objects = append(objects, newReplicaSet("1", 3, "reg/app:v1", "dep-uid"))
			}
			w := mustLoad(t, fake.NewClientset(objects...), tt.ref)
			prev, strategy := w.Previous(Images(tt.images))
			if images := prev.Images; !reflect.DeepEqual(images, tt.wantImages) || prev.Resources != nil || string(strategy) != tt.wantStrategy {
				t.Errorf("Previous = %v, %s; want %v, %s", images, strategy, tt.wantImages, tt.wantStrategy)
			}
		})
	}
}
