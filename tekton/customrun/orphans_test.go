package customrun

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonfake "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestDecideOrphan(t *testing.T) {
	lock := func(holder, uid string, phase rollout.Phase) *rollout.Record {
		return &rollout.Record{Holder: holder, HolderUID: types.UID(uid), Phase: phase, RolloutID: "r1"}
	}
	gone := runLookup{Watched: true}
	exists := func(uid string) runLookup { return runLookup{Watched: true, Found: true, UID: types.UID(uid)} }
	seen := holderRef{Holder: "tekton:ns/run", UID: "u1"}
	tests := []struct {
		name string
		lock *rollout.Record
		seen holderRef
		run  runLookup
		want orphanAction
	}{
		{"run deleted", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, gone, orphanRollBack},
		{"run deleted while paused", lock("tekton:ns/run", "u1", rollout.PhasePaused), seen, gone, orphanRollBack},
		{"rollback under way", lock("tekton:ns/run", "u1", rollout.PhaseRollingBack), seen, gone, orphanRollBack},
		{"run created again under its name", lock("tekton:ns/run", "u1", rollout.PhaseHolding), seen, exists("u2"), orphanRollBack},
		{"lock without a UID, run deleted", lock("tekton:ns/run", "", rollout.PhaseProgressing), holderRef{Holder: "tekton:ns/run"}, gone, orphanRollBack},
		{"run exists", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, exists("u1"), orphanLeave},
		{"lock without a UID, run exists", lock("tekton:ns/run", "", rollout.PhaseProgressing), holderRef{Holder: "tekton:ns/run"}, exists("u2"), orphanLeave},
		{"run outside the controller's scope", lock("tekton:ns/run", "u1", rollout.PhaseProgressing), seen, runLookup{}, orphanLeave},
		{"no lock any longer", nil, seen, gone, orphanLeave},
		{"rolled back", lock("tekton:ns/run", "u1", rollout.PhaseRolledBack), seen, gone, orphanLeave},
		{"succeeded", lock("tekton:ns/run", "u1", rollout.PhaseSucceeded), seen, gone, orphanLeave},
		{"another holder's now", lock("tekton:ns/next", "u7", rollout.PhaseProgressing), seen, gone, orphanLeave},
		{"a run of the same name holds it now", lock("tekton:ns/run", "u2", rollout.PhaseProgressing), seen, gone, orphanLeave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := decideOrphan(tt.lock, tt.seen, tt.run)
			if got != tt.want || why == "" {
				t.Errorf("decideOrphan = %v %q, want %v with a reason", got, why, tt.want)
			}
		})
	}
}

// lockedStatefulSet is StatefulSet ns/name (as statefulSet makes web) held for holder, of UID
// uid, by a rollout in progress.
func lockedStatefulSet(t *testing.T, ns, name, holder, uid string) *appsv1.StatefulSet {
	t.Helper()
	s := statefulSet("")
	s.Namespace, s.Name, s.UID = ns, name, types.UID(name+"-uid")
	raw, err := json.Marshal(rollout.Record{Holder: holder, HolderUID: types.UID(uid), RolloutID: "r-" + name, SpecHash: "0123456789abcdef",
		Images: map[string]string{"app": "registry.example/app:v2"}, PreviousImages: map[string]string{"app": "registry.example/app:v1"},
		Phase: rollout.PhaseProgressing, StartedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{workload.LockAnnotation: string(raw)}
	return s
}

// customRun is a run of ours, ns/name of UID uid.
func customRun(ns, name, uid string) *v1beta1.CustomRun {
	r := embedded(target)
	r.Namespace, r.Name, r.UID = ns, name, types.UID(uid)
	return r
}

// TestScanOrphans: the scan queues the rollback of the rollout of each deleted run in its scope
// (none of its name, or one of another UID) and of nothing else; the first step of each logs
// one warning naming the holder, the workload and the rollout, and marks the lock rolling back
// for that same holder; a second scan queues none of those under way.
func TestScanOrphans(t *testing.T) {
	type held struct{ ns, name, holder, uid string }
	workloads := []held{
		{"ns", "gone", "tekton:ns/gone", "u1"},            // no run of that name
		{"ns", "again", "tekton:ns/again", "u2"},          // the run of that name is another object
		{"ns", "live", "tekton:ns/live", "u3"},            // its run exists
		{"ns", "argo", "argo:ns/gone", "u4"},              // not a run's
		{"other", "elsewhere", "tekton:other/gone", "u5"}, // no run of that name, in another namespace
	}
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
			tekton := tektonfake.NewSimpleClientset(customRun("ns", "again", "u9"), customRun("ns", "live", "u3"))
			var logs bytes.Buffer
			e := &rollout.Engine{Client: kube, Now: func() time.Time { return now }}
			c := New(tekton, e, specs{}, Options{Namespace: tt.namespace, Log: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			t.Cleanup(c.orphanQueue.ShutDown)
			if err := c.Watch(ctx); err != nil {
				t.Fatal(err)
			}

			if got := c.scanOrphans(ctx); got != len(tt.want) {
				t.Fatalf("scan queued %d rollbacks, want %d", got, len(tt.want))
			}
			for range tt.want {
				c.nextOrphan(ctx)
			}
			for _, w := range workloads {
				lock, err := rollout.ReadRecord(ctx, kube, workload.Ref{Kind: workload.StatefulSet, Namespace: w.ns, Name: w.name})
				if err != nil {
					t.Fatal(err)
				}
				wantPhase := rollout.PhaseProgressing
				if slices.Contains(tt.want, w.name) {
					wantPhase = rollout.PhaseRollingBack
					lines := logLinesOf(logs.String(), "level=WARN", "rolling back the rollout of a deleted CustomRun", "workload=StatefulSet/"+w.name+" ")
					if len(lines) != 1 || !strings.Contains(lines[0], "holder="+w.holder+" ") || !strings.Contains(lines[0], "rolloutID=r-"+w.name) {
						t.Errorf("log lines of the rollback of %s: %q; want one warning naming holder %s and rollout r-%s", w.name, lines, w.holder, w.name)
					}
				}
				if lock.Phase != wantPhase || lock.Holder != w.holder || lock.HolderUID != types.UID(w.uid) {
					t.Errorf("%s: lock %s held by %s (UID %s); want %s, its holder unchanged", w.name, lock.Phase, lock.Holder, lock.HolderUID, wantPhase)
				}
			}
			if again := c.scanOrphans(ctx); again != 0 {
				t.Errorf("a second scan queued %d rollbacks, want none: theirs are under way", again)
			}
		})
	}
}

// logLinesOf are the lines of logs that hold every one of subs.
func logLinesOf(logs string, subs ...string) []string {
	var out []string
	for line := range strings.Lines(logs) {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}
