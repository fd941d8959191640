package rollout

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// podLockCM is a ConfigMap in testNS at resourceVersion "rv-NAME" holding a lock annotation raw
// (none when empty).
func podLockCM(name, raw string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, ResourceVersion: "rv-" + name}}
	if raw != "" {
		cm.Annotations = map[string]string{workload.LockAnnotation: raw}
	}
	return cm
}

// podLockOf is the record of the CLI's rollout id of label-selected pods in phase.
func podLockOf(phase Phase, id string, superseded ...string) string {
	return (&Record{Holder: "cli", RolloutID: id, Phase: phase, Superseded: superseded}).encode()
}

// podWithState is a pod whose state annotation is raw (none when empty).
func podWithState(name, raw string) *corev1.Pod {
	p := runningPod(name, imageV2)
	if raw != "" {
		p.Annotations = map[string]string{inplace.StateAnnotation: raw}
	}
	return p
}

func stateOf(id string) string {
	return `{"rolloutID":"` + id + `","startedAt":"2025-03-01T12:00:00Z","containers":[],"stage":"Updated","stageAt":"2025-03-01T12:01:00Z"}`
}

// lockName is the name of a lock ConfigMap: the prefix every one carries, then suffix.
func lockName(suffix string) string {
	return "inplace-rollout-pods-" + suffix
}

var errFake = errors.New("etcd is down")

func TestPodLockObsolete(t *testing.T) {
	live := map[string]bool{"r-live": true, "r-old": true}
	tests := []struct {
		name   string
		record *Record
		want   bool
	}{
		{"rolled back", &Record{Phase: PhaseRolledBack, RolloutID: "r-live"}, true},
		{"succeeded, a pod still carries its state", &Record{Phase: PhaseSucceeded, RolloutID: "r-live"}, false},
		{"succeeded, a pod carries a superseded rollout's state", &Record{Phase: PhaseSucceeded, RolloutID: "r-new", Superseded: []string{"r-old"}}, false},
		{"succeeded, no pod carries its state", &Record{Phase: PhaseSucceeded, RolloutID: "r-gone", Superseded: []string{"r-gone-too"}}, true},
		{"released, no pod carries its state", &Record{Phase: PhaseReleased, RolloutID: "r-gone"}, true},
		{"progressing", &Record{Phase: PhaseProgressing, RolloutID: "r-gone"}, false},
		{"paused", &Record{Phase: PhasePaused, RolloutID: "r-gone"}, false},
		{"holding", &Record{Phase: PhaseHolding, RolloutID: "r-gone"}, false},
		{"rolling back", &Record{Phase: PhaseRollingBack, RolloutID: "r-gone"}, false},
		{"halted", &Record{Phase: PhaseHalted, RolloutID: "r-gone"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podLockObsolete(tt.record, live); got != tt.want {
				t.Errorf("podLockObsolete = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCollectPodLocks(t *testing.T) {
	keepRef := Ref{Kind: workload.Pods, Namespace: testNS, Selector: "app=keep"}
	keep := workload.PodLockName(keepRef.Selector)
	tests := []struct {
		name    string
		ref     Ref
		objects []runtime.Object
		fail    string // resource whose list fails
		deleted []string
	}{
		{
			name: "rolled back and forgotten locks go, the rest stay",
			ref:  keepRef,
			objects: []runtime.Object{
				podLockCM(keep, podLockOf(PhaseRolledBack, "r-keep")),
				podLockCM("unrelated", podLockOf(PhaseRolledBack, "r-x")),
				podLockCM(lockName("rolledback"), podLockOf(PhaseRolledBack, "r-rb")),
				podLockCM(lockName("done-live"), podLockOf(PhaseSucceeded, "r-live")),
				podLockCM(lockName("done-superseded-live"), podLockOf(PhaseSucceeded, "r-new", "r-old")),
				podLockCM(lockName("done-gone"), podLockOf(PhaseSucceeded, "r-gone", "r-gone-too")),
				podLockCM(lockName("progressing"), podLockOf(PhaseProgressing, "r-p")),
				podLockCM(lockName("paused"), podLockOf(PhasePaused, "r-pa")),
				podLockCM(lockName("rollingback"), podLockOf(PhaseRollingBack, "r-rbg")),
				podLockCM(lockName("halted"), podLockOf(PhaseHalted, "r-h")),
				podLockCM(lockName("no-lock"), ""),
				podLockCM(lockName("bad-lock"), "{"),
				podLockCM(lockName("bad-record"), `{"holder":"cli","phase":"Done"}`),
				podWithState("a", stateOf("r-live")),
				podWithState("b", stateOf("r-old")),
				podWithState("c", ""),
				runningPod("d", imageV1),
			},
			deleted: []string{lockName("done-gone"), lockName("rolledback")},
		},
		{
			name:    "a rollout of a workload collects nothing",
			ref:     Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName},
			objects: []runtime.Object{podLockCM(lockName("rolledback"), podLockOf(PhaseRolledBack, "r-rb"))},
		},
		{
			name: "an unreadable pod state may be any rollout's: succeeded locks stay",
			ref:  keepRef,
			objects: []runtime.Object{
				podLockCM(lockName("done-gone"), podLockOf(PhaseSucceeded, "r-gone")),
				podWithState("a", "{not json"),
			},
		},
		{
			name:    "pods that cannot be listed: succeeded locks stay",
			ref:     keepRef,
			objects: []runtime.Object{podLockCM(lockName("done-gone"), podLockOf(PhaseSucceeded, "r-gone"))},
			fail:    "pods",
		},
		{
			name:    "ConfigMaps that cannot be listed: nothing goes",
			ref:     keepRef,
			objects: []runtime.Object{podLockCM(lockName("rolledback"), podLockOf(PhaseRolledBack, "r-rb"))},
			fail:    "configmaps",
		},
		{
			name:    "no pods left: a succeeded lock goes",
			ref:     keepRef,
			objects: []runtime.Object{podLockCM(lockName("done-gone"), podLockOf(PhaseSucceeded, "r-gone"))},
			deleted: []string{lockName("done-gone")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			if tt.fail != "" {
				client.PrependReactor("list", tt.fail, func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewInternalError(errFake)
				})
			}
			(&Engine{Client: client}).collectPodLocks(context.Background(), tt.ref)
			var deleted []string
			for _, a := range client.Actions() {
				switch a.GetVerb() {
				case "delete":
					d := a.(k8stesting.DeleteAction)
					deleted = append(deleted, d.GetName())
					pre := d.GetDeleteOptions().Preconditions
					if pre == nil || pre.ResourceVersion == nil || *pre.ResourceVersion != "rv-"+d.GetName() {
						t.Errorf("delete of %s has preconditions %+v, want resourceVersion rv-%s, the version judged", d.GetName(), pre, d.GetName())
					}
				case "create", "update", "patch":
					t.Errorf("wrote %v", a)
				}
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, tt.deleted) {
				t.Errorf("deleted %v, want %v", deleted, tt.deleted)
			}
		})
	}
}

func TestCollectPodLocksGoesOnPastAFailedDelete(t *testing.T) {
	client := fake.NewClientset(
		podLockCM(lockName("a"), podLockOf(PhaseRolledBack, "r-a")),
		podLockCM(lockName("b"), podLockOf(PhaseRolledBack, "r-b")),
	)
	failed := ""
	client.PrependReactor("delete", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failed == "" {
			failed = a.(k8stesting.DeleteAction).GetName()
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, failed, errFake)
		}
		return false, nil, nil
	})
	(&Engine{Client: client}).collectPodLocks(context.Background(), Ref{Kind: workload.Pods, Namespace: testNS, Selector: "app=x"})
	cms, err := client.CoreV1().ConfigMaps(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 1 || cms.Items[0].Name != failed {
		t.Errorf("left %v, want only %s, whose delete conflicted", cms.Items, failed)
	}
}

// TestRolloutsOfPodsCollectOtherLocks: starting, finishing and rolling back a rollout of
// label-selected pods each collect the lock another selector left that no pod records, and keep
// the rollout's own.
func TestRolloutsOfPodsCollectOtherLocks(t *testing.T) {
	tests := []struct {
		name string
		run  func(fc *fakeCluster, e *Engine, spec Spec)
	}{
		{"start", func(fc *fakeCluster, e *Engine, spec Spec) {
			if _, _, err := e.Reconcile(context.Background(), spec, Status{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"finalize", func(fc *fakeCluster, e *Engine, spec Spec) {
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Phase == PhaseProgressing })
			fc.deleteOther()
			if st = fc.mustDrive(e, spec, st, nil); st.Phase != PhaseSucceeded {
				t.Fatalf("rollout ended %s: %s", st.Phase, st.Message)
			}
		}},
		{"restore", func(fc *fakeCluster, e *Engine, spec Spec) {
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Phase == PhaseProgressing })
			fc.deleteOther()
			if st = driveRollback(fc, e, spec, st); st.Phase != PhaseRolledBack {
				t.Fatalf("rollback ended %s: %s", st.Phase, st.Message)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: workload.Pods, pods: 2})
			fc.createOther()
			e := fc.engine()
			spec := fc.spec(imageV2)
			tt.run(fc, e, spec)
			if _, err := fc.client.CoreV1().ConfigMaps(testNS).Get(context.Background(), lockName("other"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the lock no pod records is still there (%v)", err)
			}
			if fc.lock() == nil {
				t.Errorf("the rollout's own lock was collected")
			}
		})
	}
}

// createOther adds the lock of another selector whose rollout succeeded and whose pods are gone.
func (fc *fakeCluster) createOther() {
	fc.t.Helper()
	if _, err := fc.client.CoreV1().ConfigMaps(testNS).Create(context.Background(), podLockCM(lockName("other"), podLockOf(PhaseSucceeded, "r-other")), metav1.CreateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// deleteOther is createOther once the rollout started: so that its end, not its start, is what
// collects the lock.
func (fc *fakeCluster) deleteOther() {
	fc.t.Helper()
	if _, err := fc.client.CoreV1().ConfigMaps(testNS).Get(context.Background(), lockName("other"), metav1.GetOptions{}); err == nil {
		fc.t.Fatalf("the start did not collect the other lock")
	}
	fc.createOther()
}
