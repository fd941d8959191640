package rollout

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestLockNamesTheTouchedPods: a rollout driven to its end leaves on its lock the name and UID of
// every pod it updated, each recorded before the pod's first write.
func TestLockNamesTheTouchedPods(t *testing.T) {
	for _, kind := range []workload.Kind{workload.StatefulSet, workload.Pods} {
		t.Run(string(kind), func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: kind, pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2)
			fc.mustDrive(e, spec, Status{}, nil)
			lock := fc.lock()
			if len(lock.Touched) != 3 || lock.TouchedMore != 0 {
				t.Fatalf("lock records touched %+v and %d more; want the 3 pods", lock.Touched, lock.TouchedMore)
			}
			for i := range 3 {
				name := fmt.Sprintf("%s-%d", testName, i)
				want := TouchedPod{Name: name, UID: types.UID("uid-" + name)}
				found := false
				for _, tp := range lock.Touched {
					found = found || tp == want
				}
				if !found {
					t.Errorf("lock records touched %+v; want %+v among them", lock.Touched, want)
				}
			}
		})
	}
}

// TestRecordTouchedIsBounded: the lock names at most maxTouched pods; beyond, it counts the pods
// that carry the rollout's state without being named, and that count never goes down.
func TestRecordTouchedIsBounded(t *testing.T) {
	const extra = 3
	fc := newFakeCluster(t, clusterOpts{kind: workload.Pods, pods: maxTouched + extra})
	w, err := workload.Load(context.Background(), fc.client, fc.spec(imageV2).Target)
	if err != nil {
		t.Fatal(err)
	}
	pods := w.Pods()
	lock := &Record{RolloutID: "r2", Superseded: []string{"r1"}}
	for _, tt := range []struct {
		name string
		// work are the pods stepped; states the rollout IDs the pods' states carry, by index.
		work        int
		states      map[int]string
		touchedMore int
		changed     bool
	}{
		{name: "up to the cap", work: maxTouched + extra, changed: true},
		{name: "nothing new", work: maxTouched + extra},
		{name: "unnamed pods updated", work: maxTouched + extra, states: map[int]string{maxTouched: "r2", maxTouched + 1: "r1", 0: "r2"}, touchedMore: 2, changed: true},
		{name: "their states gone", work: maxTouched + extra, states: map[int]string{}, touchedMore: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.states != nil {
				for i, p := range pods {
					delete(p.Annotations, inplace.StateAnnotation)
					if id, ok := tt.states[i]; ok {
						if p.Annotations == nil {
							p.Annotations = map[string]string{}
						}
						p.Annotations[inplace.StateAnnotation] = fmt.Sprintf(`{"rolloutID":%q,"stage":"Updated"}`, id)
					}
				}
			}
			next, changed := recordTouched(w, lock, pods[:tt.work])
			if changed != tt.changed || len(next.Touched) != maxTouched || next.TouchedMore != tt.touchedMore {
				t.Fatalf("recordTouched = %d named, %d more, changed %v; want %d named, %d more, changed %v",
					len(next.Touched), next.TouchedMore, changed, maxTouched, tt.touchedMore, tt.changed)
			}
			lock = next
		})
	}
}
