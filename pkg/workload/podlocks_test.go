package workload

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// lockCM is a ConfigMap in ns at resourceVersion "rv-NAME" holding a lock annotation raw
// (none when empty).
func lockCM(name, raw string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "rv-" + name}}
	if raw != "" {
		cm.Annotations = map[string]string{LockAnnotation: raw}
	}
	return cm
}

func lockOf(phase, id string, superseded ...string) string {
	return (&Lock{Holder: "cli", RolloutID: id, Phase: phase, Superseded: superseded}).encode()
}

// podWithState is a pod whose state annotation is raw.
func podWithState(name, raw string) *corev1.Pod {
	p := runningPod(name, "reg/app:v2", nil, nil)
	p.Annotations = map[string]string{inplace.StateAnnotation: raw}
	return p
}

func stateOf(id string) string {
	return `{"rolloutID":"` + id + `","startedAt":"2025-03-01T12:00:00Z","containers":[],"stage":"Updated","stageAt":"2025-03-01T12:01:00Z"}`
}

func TestCollectPodLocks(t *testing.T) {
	const keep = lockConfigMapPrefix + "keep"
	tests := []struct {
		name    string
		objects []runtime.Object
		fail    string // resource whose list fails
		deleted []string
	}{
		{
			name: "rolled back and forgotten locks go, the rest stay",
			objects: []runtime.Object{
				lockCM(keep, lockOf(LockRolledBack, "r-keep")),
				lockCM("unrelated", lockOf(LockRolledBack, "r-x")),
				lockCM(lockConfigMapPrefix+"rolledback", lockOf(LockRolledBack, "r-rb")),
				lockCM(lockConfigMapPrefix+"done-live", lockOf(LockSucceeded, "r-live")),
				lockCM(lockConfigMapPrefix+"done-superseded-live", lockOf(LockSucceeded, "r-new", "r-old")),
				lockCM(lockConfigMapPrefix+"done-gone", lockOf(LockSucceeded, "r-gone", "r-gone-too")),
				lockCM(lockConfigMapPrefix+"progressing", lockOf(LockProgressing, "r-p")),
				lockCM(lockConfigMapPrefix+"paused", lockOf(LockPaused, "r-pa")),
				lockCM(lockConfigMapPrefix+"rollingback", lockOf(LockRollingBack, "r-rbg")),
				lockCM(lockConfigMapPrefix+"halted", lockOf(LockHalted, "r-h")),
				lockCM(lockConfigMapPrefix+"no-lock", ""),
				lockCM(lockConfigMapPrefix+"bad-lock", "{"),
				podWithState("a", stateOf("r-live")),
				podWithState("b", stateOf("r-old")),
				podWithState("c", ""),
				runningPod("d", "reg/app:v1", nil, nil),
			},
			deleted: []string{lockConfigMapPrefix + "done-gone", lockConfigMapPrefix + "rolledback"},
		},
		{
			name: "an unreadable pod state may be any rollout's: succeeded locks stay",
			objects: []runtime.Object{
				lockCM(lockConfigMapPrefix+"done-gone", lockOf(LockSucceeded, "r-gone")),
				podWithState("a", "{not json"),
			},
		},
		{
			name: "pods that cannot be listed: succeeded locks stay",
			objects: []runtime.Object{
				lockCM(lockConfigMapPrefix+"done-gone", lockOf(LockSucceeded, "r-gone")),
			},
			fail: "pods",
		},
		{
			name: "ConfigMaps that cannot be listed: nothing goes",
			objects: []runtime.Object{
				lockCM(lockConfigMapPrefix+"rolledback", lockOf(LockRolledBack, "r-rb")),
			},
			fail: "configmaps",
		},
		{
			name:    "no pods left: a succeeded lock goes",
			objects: []runtime.Object{lockCM(lockConfigMapPrefix+"done-gone", lockOf(LockSucceeded, "r-gone"))},
			deleted: []string{lockConfigMapPrefix + "done-gone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			if tt.fail != "" {
				failCalls(client, "list", tt.fail, apierrors.NewInternalError(errors.New("etcd is down")))
			}
			collectPodLocks(context.Background(), client, "ns", keep)
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
		lockCM(lockConfigMapPrefix+"a", lockOf(LockRolledBack, "r-a")),
		lockCM(lockConfigMapPrefix+"b", lockOf(LockRolledBack, "r-b")),
	)
	failed := ""
	client.PrependReactor("delete", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failed == "" {
			failed = a.(k8stesting.DeleteAction).GetName()
			return true, nil, conflict("configmaps", failed)
		}
		return false, nil, nil
	})
	collectPodLocks(context.Background(), client, "ns", "")
	cms, err := client.CoreV1().ConfigMaps("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 1 || cms.Items[0].Name != failed {
		t.Errorf("left %v, want only %s, whose delete conflicted", cms.Items, failed)
	}
}

func TestFinishingPodsCollectsOtherLocks(t *testing.T) {
	other := lockCM(lockConfigMapPrefix+"other", lockOf(LockSucceeded, "r-other"))
	ops := []struct {
		name string
		op   workloadOp
		own  *Lock
	}{
		{"start", opStart, nil},
		{"finalize", opFinalize, recordedLock(LockProgressing, "reg/app:v2")},
		{"restore", opRestore, recordedLock(LockRollingBack, "reg/app:v2")},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			objects := []runtime.Object{other, runningPod("web-a", "reg/app:v2", nil, nil)}
			if tt.own != nil {
				objects = append(objects, podsLockConfigMap(t, tt.own))
			}
			client := fake.NewClientset(objects...)
			w := mustLoad(t, client, podsRef)
			if _, err := tt.op(context.Background(), w, recordedLock(LockProgressing, "reg/app:v2")); err != nil {
				t.Fatal(err)
			}
			if _, err := client.CoreV1().ConfigMaps("ns").Get(context.Background(), other.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the lock no pod records is still there (%v)", err)
			}
			if storedPodsLock(t, client) == nil {
				t.Errorf("the rollout's own lock was collected")
			}
		})
	}
}
