package orphan

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var now = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func TestDecide(t *testing.T) {
	lock := func(holder, uid string, phase rollout.Phase) *rollout.Record {
		return &rollout.Record{Holder: holder, HolderUID: types.UID(uid), Phase: phase, RolloutID: "r1"}
	}
	gone := lookup{Watched: true}
	exists := func(uid string) lookup { return lookup{Watched: true, Found: true, UID: types.UID(uid)} }
	seen := holderRef{Holder: "tekton:ns/run", UID: "u1"}
	tests := []struct {
		name    string
		lock    *rollout.Record
		seen    holderRef
		obj     lookup
		want    action
		wantWhy string
	}{
		{"deleted", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, gone, rollBack, "CustomRun ns/run no longer exists"},
		{"deleted while paused", lock("tekton:ns/run", "u1", rollout.PhasePaused), seen, gone, rollBack, "no longer exists"},
		{"rollback under way", lock("tekton:ns/run", "u1", rollout.PhaseRollingBack), seen, gone, rollBack, "no longer exists"},
		{"created again under its name", lock("tekton:ns/run", "u1", rollout.PhaseHolding), seen, exists("u2"), rollBack,
			"CustomRun ns/run (UID u1) was deleted; the CustomRun of that name now is another (UID u2)"},
		{"lock without a UID, deleted", lock("tekton:ns/run", "", rollout.PhaseProgressing), holderRef{Holder: "tekton:ns/run"}, gone, rollBack, "no longer exists"},
		{"exists", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, exists("u1"), leave, "CustomRun ns/run exists"},
		{"lock without a UID, exists", lock("tekton:ns/run", "", rollout.PhaseProgressing), holderRef{Holder: "tekton:ns/run"}, exists("u2"), leave, "exists"},
		{"outside the controller's scope", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, lookup{}, leave, "tekton:ns/run names no CustomRun this controller watches"},
		{"no lock any longer", nil, seen, gone, leave, "records no rollout"},
		{"rolled back", lock("tekton:ns/run", "u1", rollout.PhaseRolledBack), seen, gone, leave, "rollout r1 ended (RolledBack)"},
		{"succeeded", lock("tekton:ns/run", "u1", rollout.PhaseSucceeded), seen, gone, leave, "ended"},
		{"another holder's now", lock("tekton:ns/next", "u7", rollout.PhaseProgressing), seen, gone, leave, "held by tekton:ns/next"},
		{"an object of the same name holds it now", lock("tekton:ns/run", "u2", rollout.PhaseProgressing), seen, gone, leave, `(UID "u2") now`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := decide(tt.lock, tt.seen, tt.obj, "CustomRun")
			if got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("decide = %v %q, want %v with %q", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

// lockedStatefulSet is StatefulSet ns/name of 3 replicas held for holder, of UID uid, by a
// rollout in progress.
func lockedStatefulSet(t *testing.T, ns, name, holder, uid string) *appsv1.StatefulSet {
	t.Helper()
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Generation: 1}}
	s.Status.ObservedGeneration = 1
	s.Spec.Replicas = ptr.To[int32](3)
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	s.Spec.Template.Labels = map[string]string{"app": name}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}
	raw, err := json.Marshal(rollout.Record{Holder: holder, HolderUID: types.UID(uid), RolloutID: "r-" + name, SpecHash: "0123456789abcdef",
		Images: map[string]string{"app": "registry.example/app:v2"}, PreviousImages: map[string]string{"app": "registry.example/app:v1"},
		Phase: rollout.PhaseProgressing, StartedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{workload.LockAnnotation: string(raw)}
	return s
}

// TestScan: a scan queues the rollback of the rollout of each deleted object in its scope (none
// of its name, or one of another UID) and of nothing else; the first step of each logs one
// warning naming the holder, the workload and the rollout, and marks the lock rolling back for
// that same holder; a second scan queues none of those under way.
func TestScan(t *testing.T) {
	type held struct{ ns, name, holder, uid string }
	workloads := []held{
		{"ns", "gone", "tekton:ns/gone", "u1"},            // no object of that name
		{"ns", "again", "tekton:ns/again", "u2"},          // the object of that name is another
		{"ns", "live", "tekton:ns/live", "u3"},            // its object exists
		{"ns", "argo", "argo:ns/gone", "u4"},              // another driver's
		{"other", "elsewhere", "tekton:other/gone", "u5"}, // no object of that name, in another namespace
	}
	objects := map[string]types.UID{"ns/again": "u9", "ns/live": "u3"}
	tests := []struct {
		name, namespace string
		want            []string
	}{
		{"every namespace", "", []string{"again", "elsewhere", "gone"}},
		{"one namespace", "ns", []string{"again", "gone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, w := range workloads {
				objs = append(objs, lockedStatefulSet(t, w.ns, w.name, w.holder, w.uid))
			}
			kube := kubefake.NewClientset(objs...)
			var logs bytes.Buffer
			s := New(Config{Kind: "CustomRun", Prefix: "tekton:", Namespace: tt.namespace, Every: time.Hour,
				Engine: &rollout.Engine{Client: kube, Now: func() time.Time { return now }},
				Get: func(ns, name string) (types.UID, bool) {
					uid, ok := objects[ns+"/"+name]
					return uid, ok
				},
				Log: slog.New(slog.NewTextHandler(&logs, nil))})
			t.Cleanup(s.ShutDown)
			ctx := t.Context()

			if got := s.Scan(ctx); got != len(tt.want) {
				t.Fatalf("scan queued %d rollbacks, want %d", got, len(tt.want))
			}
			for range tt.want {
				s.Next(ctx)
			}
			for _, w := range workloads {
				lock, err := rollout.ReadRecord(ctx, kube, workload.Ref{Kind: workload.StatefulSet, Namespace: w.ns, Name: w.name})
				if err != nil {
					t.Fatal(err)
				}
				wantPhase := rollout.PhaseProgressing
				if slices.Contains(tt.want, w.name) {
					wantPhase = rollout.PhaseRollingBack
					lines := linesOf(logs.String(), "level=WARN", "rolling back the rollout of a deleted CustomRun", "workload=StatefulSet/"+w.name+" ")
					if len(lines) != 1 || !strings.Contains(lines[0], "holder="+w.holder+" ") || !strings.Contains(lines[0], "rolloutID=r-"+w.name) {
						t.Errorf("log lines of the rollback of %s: %q; want one warning naming holder %s and rollout r-%s", w.name, lines, w.holder, w.name)
					}
				}
				if lock.Phase != wantPhase || lock.Holder != w.holder || lock.HolderUID != types.UID(w.uid) {
					t.Errorf("%s: lock %s held by %s (UID %s); want %s, its holder unchanged", w.name, lock.Phase, lock.Holder, lock.HolderUID, wantPhase)
				}
			}
			if again := s.Scan(ctx); again != 0 {
				t.Errorf("a second scan queued %d rollbacks, want none: theirs are under way", again)
			}
		})
	}
}

// TestDeletedAsksForOneScan: requests while a scan is due make no second.
func TestDeletedAsksForOneScan(t *testing.T) {
	s := New(Config{Kind: "CustomRun", Prefix: "tekton:", Every: time.Hour})
	t.Cleanup(s.ShutDown)
	if got := s.Pending(); got != 0 {
		t.Fatalf("Pending = %d before any deletion, want 0", got)
	}
	s.Deleted()
	s.Deleted()
	if got := s.Pending(); got != 1 {
		t.Errorf("Pending = %d after two deletions, want 1", got)
	}
}

// linesOf are the lines of logs that hold every one of subs.
func linesOf(logs string, subs ...string) []string {
	var out []string
	for line := range strings.Lines(logs) {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}
