package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"

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

// TestBatchNamesItsPodsAndPatchesThem: a pod's image is patched only once the lock names it,
// and the call that names a batch's pods patches them too: recording them costs no call of its
// own.
func TestBatchNamesItsPodsAndPatchesThem(t *testing.T) {
	for _, kind := range []workload.Kind{workload.StatefulSet, workload.Pods} {
		t.Run(string(kind), func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: kind, pods: 4})
			// The lock as the fake API server holds it: the reactor runs under the client's
			// lock, so it reads the tracker, not the client.
			lockNow := func() *Record {
				gvr, name := appsv1.SchemeGroupVersion.WithResource("statefulsets"), testName
				if kind == workload.Pods {
					gvr, name = corev1.SchemeGroupVersion.WithResource("configmaps"), workload.PodLockName("app="+testName)
				}
				obj, err := fc.client.Tracker().Get(gvr, testNS, name)
				if err != nil {
					return nil
				}
				raw := obj.(metav1.Object).GetAnnotations()[workload.LockAnnotation]
				var l Record
				if raw == "" || json.Unmarshal([]byte(raw), &l) != nil {
					return nil
				}
				return &l
			}
			named := func(l *Record, uid types.UID) bool {
				return l != nil && slices.ContainsFunc(l.Touched, func(tp TouchedPod) bool { return tp.UID == uid })
			}
			fc.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				p := a.(k8stesting.PatchAction)
				if strings.Contains(string(p.GetPatch()), `"containers"`) && !named(lockNow(), types.UID("uid-"+p.GetName())) {
					t.Errorf("pod %s's image patched before the lock names it", p.GetName())
				}
				return false, nil, nil
			})
			spec := fc.spec(imageV2, intstr.FromInt32(2), intstr.FromString("100%"))
			spec.MaxUnavailable = intstr.FromInt32(2)
			var before *Record
			st, err := fc.drive(fc.engine(), spec, Status{}, nil, func(Status) {
				after := fc.lock()
				for _, p := range fc.pods() {
					if named(after, p.UID) && !named(before, p.UID) && p.Spec.Containers[0].Image != imageV2 {
						t.Errorf("pod %s named by the lock in a call that left it on %s", p.Name, p.Spec.Containers[0].Image)
					}
				}
				before = after
			})
			if err != nil || st.Phase != PhaseSucceeded {
				t.Fatalf("rollout ended %s: %v (%s)", st.Phase, err, st.Message)
			}
			if l := fc.lock(); l == nil || len(l.Touched) != 4 {
				t.Fatalf("lock %+v; want the 4 pods touched", l)
			}
		})
	}
}

// TestRecordTouchedIsBounded: the lock names at most maxTouched pods; beyond, it counts the pods
// it sets out to update and those that carry the rollout's state without being named, before
// their first write (so the write changes nothing), and that count never goes down.
func TestRecordTouchedIsBounded(t *testing.T) {
	const extra = 5
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
		{name: "up to the cap", work: maxTouched, changed: true},
		{name: "nothing new", work: maxTouched},
		{name: "unnamed pods set out to update", work: maxTouched + 2, touchedMore: 2, changed: true},
		{name: "their write changes nothing", work: maxTouched + 2, states: map[int]string{0: "r2", maxTouched: "r2", maxTouched + 1: "r1"}, touchedMore: 2},
		{name: "unnamed pods updated outside the work", work: maxTouched, states: map[int]string{maxTouched: "r2", maxTouched + 1: "r1", maxTouched + 2: "r2"}, touchedMore: 3, changed: true},
		{name: "their states gone, another rollout's state", work: maxTouched, states: map[int]string{maxTouched + 3: "r0"}, touchedMore: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for i, p := range pods {
				delete(p.Annotations, inplace.StateAnnotation)
				if id, ok := tt.states[i]; ok {
					if p.Annotations == nil {
						p.Annotations = map[string]string{}
					}
					p.Annotations[inplace.StateAnnotation] = fmt.Sprintf(`{"rolloutID":%q,"stage":"Updated"}`, id)
				}
			}
			var stateOf []podRollout
			for _, p := range pods {
				s, err := inplace.ReadState(p)
				if err != nil {
					t.Fatal(err)
				}
				if s != nil {
					stateOf = append(stateOf, podRollout{p.UID, s.RolloutID})
				}
			}
			next, changed := recordTouched(stateOf, lock, pods[:tt.work])
			if changed != tt.changed || len(next.Touched) != maxTouched || next.TouchedMore != tt.touchedMore {
				t.Fatalf("recordTouched = %d named, %d more, changed %v; want %d named, %d more, changed %v",
					len(next.Touched), next.TouchedMore, changed, maxTouched, tt.touchedMore, tt.changed)
			}
			lock = next
		})
	}
}

// TestTheLockNamesAPodBeforeItsFirstWrite: a batch's pods are named on the lock before any of
// them is written: every pod write finds its pod named there already, and a step whose lock
// write fails writes no pod.
func TestTheLockNamesAPodBeforeItsFirstWrite(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	spec := fc.spec(imageV2, one, all)
	stsGVR := appsv1.SchemeGroupVersion.WithResource("statefulsets")
	var unnamed []string
	podWrites := 0
	for _, verb := range []string{"patch", "update"} {
		fc.client.PrependReactor(verb, "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			podWrites++
			var name string
			switch a := a.(type) {
			case k8stesting.PatchAction:
				name = a.GetName()
			case k8stesting.UpdateAction:
				name = a.GetObject().(metav1.Object).GetName()
			}
			// The tracker, not the client: a reactor runs under the fake client's lock.
			obj, err := fc.client.Tracker().Get(stsGVR, testNS, testName)
			if err != nil {
				return true, nil, err
			}
			var l Record
			if raw := obj.(metav1.Object).GetAnnotations()[workload.LockAnnotation]; raw != "" {
				if err := json.Unmarshal([]byte(raw), &l); err != nil {
					return true, nil, err
				}
			}
			if !slices.ContainsFunc(l.Touched, func(tp TouchedPod) bool { return tp.Name == name }) {
				unnamed = append(unnamed, name)
			}
			return false, nil, nil
		})
	}

	// Started, up to the step that writes the first batch's pod.
	var st Status
	for podWrites == 0 {
		var err error
		if st, _, err = e.Reconcile(context.Background(), spec, st); err != nil {
			t.Fatal(err)
		}
	}
	if st.Batch != 1 || st.Updating != 1 {
		t.Fatalf("the first step that wrote a pod: %+v, want batch 1 started with 1 pod", st)
	}
	// The first batch's pod runs its new image: the next step starts the second batch.
	for range 2 {
		fc.now = fc.now.Add(tick)
		fc.play()
	}

	// The step that starts the second batch cannot write the lock: it writes no pod.
	writesBefore := podWrites
	refused := apierrors.NewInternalError(errors.New("injected: etcd unavailable"))
	failing(fc.client, "patch", "statefulsets", -1, refused)
	failing(fc.client, "update", "statefulsets", -1, refused)
	if got, _, err := e.Reconcile(context.Background(), spec, st); err == nil {
		t.Fatalf("the step with its lock write refused returned no error: %+v", got)
	}
	if podWrites != writesBefore {
		t.Errorf("%d pod writes in the step whose lock write failed, want none", podWrites-writesBefore)
	}
	if len(unnamed) > 0 {
		t.Errorf("pods written before the lock named them: %v", unnamed)
	}
}
