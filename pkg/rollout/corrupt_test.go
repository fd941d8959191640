package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// writeActions counts the creates, updates, patches and deletes the fake API server was sent.
func writeActions(fc *fakeCluster) int {
	fc.t.Helper()
	n := 0
	for _, a := range fc.client.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete", "deletecollection":
			n++
		}
	}
	return n
}

// editState rewrites the state annotation of pod name as a person editing it by hand would.
func editState(fc *fakeCluster, name string, edit func(raw string) string) {
	fc.t.Helper()
	p := fc.pod(name)
	p.Annotations[inplace.StateAnnotation] = edit(p.Annotations[inplace.StateAnnotation])
	fc.updatePod(p)
}

// editLock rewrites the StatefulSet's lock annotation as a person editing it by hand would.
func editLock(fc *fakeCluster, edit func(raw string) string) {
	fc.t.Helper()
	sts := fc.sts()
	sts.Annotations[workload.LockAnnotation] = edit(sts.Annotations[workload.LockAnnotation])
	if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// setField decodes raw JSON as an object, sets field (a path of object keys, or of keys and
// the index 0 of an array) to value and encodes it again.
func setField(t *testing.T, value any, path ...string) func(string) string {
	t.Helper()
	return func(raw string) string {
		var doc map[string]any
		if err := json.Unmarshal([]byte(raw), &doc); err != nil {
			t.Fatalf("annotation %s: %v", raw, err)
		}
		obj := doc
		for _, key := range path[:len(path)-1] {
			switch next := obj[key].(type) {
			case map[string]any:
				obj = next
			case []any:
				obj = next[0].(map[string]any)
			default:
				t.Fatalf("annotation %s has no object at %s", raw, key)
			}
		}
		obj[path[len(path)-1]] = value
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
}

func replaceWith(s string) func(string) string { return func(string) string { return s } }

// TestCorruptedAnnotationsStopWithoutWriting: a lock on the workload or a state on an updated
// pod, edited by hand into invalid JSON or into JSON no version writes, stops the rollout with
// an error naming the object and the field, and nothing written: no pod patched, no lock
// overwritten. An explicit rollback over a corrupted lock stops the same way.
func TestCorruptedAnnotationsStopWithoutWriting(t *testing.T) {
	tests := []struct {
		name string
		// lock edits the StatefulSet's lock; state edits the state of web-2, the pod updated.
		lock, state func(t *testing.T) func(string) string
		// rollback asks for a rollback instead of going on with the rollout.
		rollback bool
		want     string
	}{
		{name: "state not JSON", state: func(*testing.T) func(string) string { return replaceWith(`{"stage":"Updated",`) },
			want: "pod shop/web-2: annotation inplace-rollout.io/state is not valid JSON"},
		{name: "state of the wrong type", state: func(*testing.T) func(string) string { return replaceWith(`["Updated"]`) },
			want: "pod shop/web-2: annotation inplace-rollout.io/state is not valid JSON: json: cannot unmarshal array"},
		{name: "state with a stage no version writes", state: func(t *testing.T) func(string) string { return setField(t, "Done", "stage") },
			want: `pod shop/web-2: annotation inplace-rollout.io/state is not a state this version writes: stage "Done" is none of Preparing,`},
		{name: "state with a negative restart count", state: func(t *testing.T) func(string) string { return setField(t, -1, "containers", "restartsBefore") },
			want: "pod shop/web-2: annotation inplace-rollout.io/state is not a state this version writes: containers[0].restartsBefore is -1, below 0"},
		{name: "state with an image that is not a reference", state: func(t *testing.T) func(string) string {
			return setField(t, "Reg.Example/App:v1 ", "containers", "beforeImage")
		}, want: `pod shop/web-2: annotation inplace-rollout.io/state is not a state this version writes: containers[0].beforeImage "Reg.Example/App:v1 " is not an image reference`},
		{name: "state naming a container the pod does not have", state: func(t *testing.T) func(string) string { return setField(t, "sidecar", "containers", "name") },
			want: `pod shop/web-2: annotation inplace-rollout.io/state is not a state this version writes: containers[0]: the pod has no container "sidecar"`},
		{name: "lock not JSON", lock: func(*testing.T) func(string) string { return replaceWith(`{"holder":"cli"`) },
			want: "StatefulSet shop/web: annotation inplace-rollout.io/rollout is not valid JSON"},
		{name: "lock with a phase no version writes", lock: func(t *testing.T) func(string) string { return setField(t, "Finished", "phase") },
			want: `StatefulSet shop/web: annotation inplace-rollout.io/rollout is not a lock this version writes: phase "Finished" is none of`},
		{name: "lock with a negative count", lock: func(t *testing.T) func(string) string { return setField(t, -3, "acceptedPods") },
			want: "StatefulSet shop/web: annotation inplace-rollout.io/rollout is not a lock this version writes: acceptedPods is -3, below 0"},
		{name: "lock with an image that is not a reference", lock: func(t *testing.T) func(string) string { return setField(t, "v1 of app", "previousImages", "app") },
			want: `StatefulSet shop/web: annotation inplace-rollout.io/rollout is not a lock this version writes: previousImages[app] "v1 of app" is not an image reference`},
		{name: "lock with a null strategy", lock: func(t *testing.T) func(string) string { return setField(t, nil, "previousStrategy") },
			want: "StatefulSet shop/web: annotation inplace-rollout.io/rollout is not a lock this version writes: previousStrategy is null, not an update strategy object"},
		{name: "rollback over a lock not JSON", rollback: true, lock: func(*testing.T) func(string) string { return replaceWith("{edited") },
			want: "StatefulSet shop/web: annotation inplace-rollout.io/rollout is not valid JSON"},
		{name: "rollback over a lock with a phase no version writes", rollback: true, lock: func(t *testing.T) func(string) string { return setField(t, "", "phase") },
			want: `StatefulSet shop/web: annotation inplace-rollout.io/rollout is not a lock this version writes: phase "" is none of`},
		{name: "rollback over a lock with a strategy that is not an object", rollback: true, lock: func(t *testing.T) func(string) string {
			return setField(t, "OnDelete", "previousStrategy")
		}, want: `previousStrategy is "OnDelete", not an update strategy object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2)
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
			fc.play()
			if tt.state != nil {
				editState(fc, "web-2", tt.state(t))
			}
			if tt.lock != nil {
				editLock(fc, tt.lock(t))
			}
			fc.client.ClearActions()
			before := fc.snapshot()
			var err error
			if tt.rollback {
				_, err = rollBack(fc, e, spec, st)
			} else {
				_, _, err = e.Reconcile(context.Background(), spec, st)
			}
			var blocked *BlockedError
			if !errors.As(err, &blocked) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %T %v; want a *BlockedError saying %q", err, err, tt.want)
			}
			if !strings.Contains(err.Error(), "restore") {
				t.Errorf("error %q says no remedy", err)
			}
			if n := writeActions(fc); n != 0 || fc.snapshot() != before {
				t.Errorf("%d writes after the annotation was corrupted: %v", n, fc.client.Actions())
			}
		})
	}
}

// TestRollbackLeavesACorruptedStateAlone: a rollback puts back every pod it can read, and the
// pod whose state was edited into something no version writes is neither patched nor forgotten:
// the rollback ends Failed, naming it and the field.
func TestRollbackLeavesACorruptedStateAlone(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T) func(string) string
		want string
	}{
		{"unknown stage", func(t *testing.T) func(string) string { return setField(t, "Reverting", "stage") }, `stage "Reverting" is none of`},
		{"negative restart count", func(t *testing.T) func(string) string { return setField(t, -7, "containers", "restartsBefore") }, "containers[0].restartsBefore is -7, below 0"},
		{"before image not a reference", func(t *testing.T) func(string) string { return setField(t, "::", "containers", "beforeImage") }, `containers[0].beforeImage "::" is not an image reference`},
		{"container the pod does not have", func(t *testing.T) func(string) string { return setField(t, "db", "containers", "name") }, `the pod has no container "db"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2)
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 2 })
			fc.play()
			editState(fc, "web-2", tt.edit(t))
			corrupted := mustJSON(fc.pod("web-2").ObjectMeta.Annotations) + mustJSON(fc.pod("web-2").Spec)
			st = driveRollback(fc, e, spec, st)
			if st.Phase != PhaseFailed || !strings.Contains(st.Message, "pod shop/web-2") || !strings.Contains(st.Message, tt.want) {
				t.Fatalf("status = phase %s, message %q; want Failed, naming pod shop/web-2 and saying %q", st.Phase, st.Message, tt.want)
			}
			if got := mustJSON(fc.pod("web-2").ObjectMeta.Annotations) + mustJSON(fc.pod("web-2").Spec); got != corrupted {
				t.Errorf("the rollback wrote to web-2:\n before %s\n after %s", corrupted, got)
			}
			if got := fc.pod("web-1").Spec.Containers[0].Image; imageIDOf(got) != imageIDOf(imageV1) {
				t.Errorf("web-1 on %s after the rollback, want %s", got, imageV1)
			}
		})
	}
}
