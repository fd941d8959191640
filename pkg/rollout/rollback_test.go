package rollout

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// stubWorkload is a workload as observed, for the pure functions that judge pods against it:
// what Ref, Replicas, Template and RevisionLabels say. Anything else it is asked panics.
type stubWorkload struct {
	workload.Workload
	ref       workload.Ref
	replicas  int
	template  *corev1.PodTemplateSpec
	labels    map[string]string
	labelsOK  bool
	labelsErr error
}

func (s *stubWorkload) Ref() workload.Ref                 { return s.ref }
func (s *stubWorkload) Replicas() int                     { return s.replicas }
func (s *stubWorkload) Template() *corev1.PodTemplateSpec { return s.template }
func (s *stubWorkload) RevisionLabels(workload.Change) (map[string]string, bool, error) {
	return s.labels, s.labelsOK, s.labelsErr
}

// The rollout rolled back in these tests, r2, took container app of StatefulSet shop/web from
// imageV1 to imageV2; its new revision is labelled newRevision.
const (
	rbRollout   = "r2"
	newRevision = "web-new"
)

// rbStarted is when the rollout's first pod started.
var rbStarted = t0.Add(-30 * time.Minute)

// rbWorkload is StatefulSet shop/web of four pods, held by the rollout with its images in the template.
func rbWorkload() *stubWorkload {
	return &stubWorkload{
		ref:      workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName},
		replicas: 4,
		template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: testApp, Image: imageV2}}}},
		labels:   map[string]string{appsv1.ControllerRevisionHashLabelKey: newRevision}, labelsOK: true,
	}
}

// rbLock is the lock of rollout r2, rolling back.
func rbLock() *Record {
	return &Record{
		Holder: testOwner, RolloutID: rbRollout, Phase: PhaseRollingBack, Message: "pod web-0 failed", StartedAt: rbStarted,
		Images: map[string]string{testApp: imageV2}, PreviousImages: map[string]string{testApp: imageV1},
		BeforeImages: map[string][]string{testApp: {imageV1}},
	}
}

// rbState is the state rollout r2 writes on a pod it updates from imageV1 to imageV2, at stage,
// started minutes after rbStarted.
func rbState(stage inplace.Stage, minutes int) *inplace.State {
	at := rbStarted.Add(time.Duration(minutes) * time.Minute)
	return &inplace.State{RolloutID: rbRollout, StartedAt: at, Stage: stage, StageAt: at, Containers: []inplace.ContainerState{{
		Name: testApp, BeforeImage: imageV1, BeforeImageID: imageIDOf(imageV1), AfterImage: imageV2, AfterImageID: imageIDOf(imageV2)}}}
}

// rbCarrying is p carrying s as its state annotation, at the new revision.
func rbCarrying(p *corev1.Pod, s *inplace.State) *corev1.Pod {
	data, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	p.Annotations = map[string]string{inplace.StateAnnotation: string(data)}
	p.Labels[appsv1.ControllerRevisionHashLabelKey] = newRevision
	return p
}

// rbUpdated is a pod rollout r2 updated, started minutes after rbStarted.
func rbUpdated(name string, minutes int) *corev1.Pod {
	return rbCarrying(runningPod(name, imageV2), rbState(inplace.StageUpdated, minutes))
}

// rbRolledBack is a pod whose revert finished.
func rbRolledBack(name string) *corev1.Pod {
	return rbCarrying(runningPod(name, imageV1), rbState(inplace.StageRolledBack, 0))
}

// rbFailedRevert is a pod whose revert to imageV1 failed on the kubelet's crash back-off, and that
// still crash-loops, or that got back since (recovered): it runs imageV1, Ready.
func rbFailedRevert(name string, recovered bool) *corev1.Pod {
	s := rbState(inplace.StageFailed, 0)
	s.Containers[0].RevertImage, s.Reason = imageV1, "rollback failed: CrashLoopBackOff: container \"app\": back-off 5m0s"
	p := rbCarrying(runningPod(name, imageV1), s)
	if !recovered {
		p.Status.Conditions[0].Status = corev1.ConditionFalse
		p.Status.ContainerStatuses[0].Ready, p.Status.ContainerStatuses[0].RestartCount = false, 6
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s"}}
	}
	return p
}

func rbEdit[T any](v T, f func(T)) T { f(v); return v }

// rbDeleting is p being deleted.
func rbDeleting(p *corev1.Pod) *corev1.Pod {
	p.DeletionTimestamp = ptr(metav1.NewTime(t0))
	return p
}

// rbUnreadable is p with its state annotation edited into something no version reads.
func rbUnreadable(p *corev1.Pod) *corev1.Pod {
	p.Annotations = map[string]string{inplace.StateAnnotation: "{edited"}
	return p
}

// rbPuller is a puller pod of rollout id.
func rbPuller(id, node string) *corev1.Pod {
	p := runningPod(prepull.Name(id, node), "reg.example/puller:v1")
	p.Labels = map[string]string{prepull.LabelRollout: id, prepull.LabelNode: node}
	return p
}

// rbOwnedBy is p controlled by a ReplicaSet other than the workload.
func rbOwnedBy(p *corev1.Pod, name string) *corev1.Pod {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: "uid-rs-" + types.UID(name), Controller: ptr(true)}}
	return p
}

// TestDecideRollback: the next step of a rollback, decided from what observeRollback saw of the
// pods rollbackPods found (pods) and of the rest of the namespace (others). StatefulSet
// shop/web, four pods, rolled back two at a time, unless a case says otherwise.
func TestDecideRollback(t *testing.T) {
	touched := func(names ...string) func(*Record) {
		return func(l *Record) {
			for _, n := range names {
				l.Touched = append(l.Touched, TouchedPod{Name: n, UID: types.UID("uid-" + n)})
			}
		}
	}
	tests := []struct {
		name   string
		pods   []*corev1.Pod
		others []*corev1.Pod
		w      func(*stubWorkload)
		lock   func(*Record)
		spec   func(*RollbackSpec)
		want   rollbackAction
		// work names the pods of the step, in order; rolledBack and updating are its counts.
		work                 []string
		rolledBack, updating int
		// says are in the step's message, in order.
		says []string
	}{
		// Reverting: the pods the rollout touched go back, most recently started first.
		{name: "updated pods go back, max-unavailable at a time", pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUpdated("web-1", 1), rbUpdated("web-2", 2), runningPod("web-3", imageV1)},
			want: rbRevert, work: []string{"web-2", "web-1"}, updating: 2, says: []string{"rolling back: 0 pods reverted, 3 to go: pod web-0 failed"}},
		{name: "a revert in flight goes on before another starts", pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUpdated("web-1", 3), rbCarrying(runningPod("web-2", imageV1), rbState(inplace.StageRollingBack, 1))},
			want: rbRevert, work: []string{"web-2", "web-1"}, updating: 2},
		{name: "pods started at the same instant go back in reverse update order", pods: []*corev1.Pod{rbUpdated("web-0", 5), rbUpdated("web-1", 5), rbUpdated("web-2", 5)},
			spec: func(s *RollbackSpec) { s.MaxUnavailable = intstr.FromString("100%") },
			want: rbRevert, work: []string{"web-2", "web-1", "web-0"}, updating: 3},
		{name: "max-unavailable as a percentage of the replicas", pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUpdated("web-1", 1), rbUpdated("web-2", 2), rbUpdated("web-3", 3)},
			spec: func(s *RollbackSpec) { s.MaxUnavailable = intstr.FromString("25%") },
			want: rbRevert, work: []string{"web-3"}, updating: 1, says: []string{"0 pods reverted, 4 to go"}},
		{name: "pods rolled back already are counted", pods: []*corev1.Pod{rbRolledBack("web-0"), rbRolledBack("web-1"), rbUpdated("web-2", 2)},
			want: rbRevert, work: []string{"web-2"}, rolledBack: 2, updating: 1, says: []string{"2 pods reverted, 1 to go"}},
		{name: "a pod whose update failed goes back like the others", pods: []*corev1.Pod{rbUpdated("web-0", 0), rbCarrying(runningPod("web-1", imageV2), rbEdit(rbState(inplace.StageFailed, 1), func(s *inplace.State) { s.Reason = "CrashLoopBackOff" }))},
			want: rbRevert, work: []string{"web-1", "web-0"}, updating: 2},
		{name: "a pod of a superseded rollout goes back too", pods: []*corev1.Pod{rbCarrying(runningPod("web-0", imageV2), rbEdit(rbState(inplace.StageUpdated, 0), func(s *inplace.State) { s.RolloutID = "r1" }))},
			lock: func(l *Record) { l.Superseded = []string{"r1"} }, want: rbRevert, work: []string{"web-0"}, updating: 1},
		{name: "a pod found outside the workload by its state goes back too", pods: []*corev1.Pod{rbRolledBack("web-0"), rbOwnedBy(rbUpdated("loose-1", 0), "other")},
			want: rbRevert, work: []string{"loose-1"}, rolledBack: 1, updating: 1},
		{name: "a pod deleted mid-revert is left to the controller", pods: []*corev1.Pod{rbRolledBack("web-0"), rbDeleting(rbCarrying(runningPod("web-1", imageV1), rbState(inplace.StageRollingBack, 0)))},
			want: rbRestore, rolledBack: 1, says: []string{"rolled back 1 pods"}},

		// Strays: pods created from the new template while the rollout held the workload.
		{name: "strays are adopted first", pods: []*corev1.Pod{rbUpdated("web-0", 0), runningPod("web-1", imageV2), rbFailedRevert("web-2", true)},
			want: rbAdopt, work: []string{"web-1"}, says: []string{"rolling back: 1 pods created from the new template meanwhile go back too"}},
		{name: "a pod a rollout left on the new images is a stray", pods: []*corev1.Pod{rbCarrying(runningPod("web-1", imageV2), rbEdit(rbState(inplace.StageUpdated, 0), func(s *inplace.State) { s.RolloutID = "r0" }))},
			want: rbAdopt, work: []string{"web-1"}},
		{name: "a pod another rollout is updating is no stray", pods: []*corev1.Pod{rbRolledBack("web-0"), rbCarrying(
			// The status still reports the container the update replaces.
			rbEdit(runningPod("web-1", imageV2), func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ContainerID = "containerd://replaced" }),
			// Patched five minutes ago: within its progress deadline.
			rbEdit(rbState(inplace.StageUpdating, 25), func(s *inplace.State) { s.RolloutID, s.Containers[0].FromContainerID = "r9", "containerd://replaced" }))},
			want: rbRestore, rolledBack: 1},
		{name: "a stray that does not run is left to the controller", pods: []*corev1.Pod{rbRolledBack("web-0"), rbEdit(runningPod("web-1", imageV2), func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })},
			want: rbRestore, rolledBack: 1},
		{name: "label-selected pods have no strays", pods: []*corev1.Pod{rbRolledBack("web-0"), runningPod("web-1", imageV2)},
			w: func(w *stubWorkload) {
				w.ref, w.template = workload.Ref{Kind: workload.Pods, Namespace: testNS, Selector: "app=web"}, nil
			},
			want: rbRestore, rolledBack: 1, says: []string{"rolled back 1 pods; pods in shop matching \"app=web\" restored"}},

		// Failed reverts are looked at again.
		{name: "a failed revert whose pod got back is recorded rolled back", pods: []*corev1.Pod{rbRolledBack("web-0"), rbFailedRevert("web-1", true), rbUpdated("web-2", 2)},
			want: rbRetry, work: []string{"web-1"}, rolledBack: 2, says: []string{"rolling back: 2 pods reverted, 1 to go"}},
		{name: "a revert still on the kubelet's crash back-off stays for a person", pods: []*corev1.Pod{rbRolledBack("web-0"), rbFailedRevert("web-1", false), rbFailedRevert("web-2", true)},
			want: rbRetry, work: []string{"web-2"}, rolledBack: 2},
		{name: "the other pods go back past a failed revert", pods: []*corev1.Pod{rbFailedRevert("web-1", false), rbUpdated("web-2", 2)},
			want: rbRevert, work: []string{"web-2"}, updating: 1},
		{name: "a failed revert ends the rollback for a person", pods: []*corev1.Pod{rbRolledBack("web-0"), rbFailedRevert("web-1", false)},
			want: rbNeedsPerson, rolledBack: 1, says: []string{"rollback incomplete, a person must look: pod web-1: rollback failed: CrashLoopBackOff"}},

		// Pods for a person, and pods passed over.
		{name: "a state edited to name another image stays for a person", pods: []*corev1.Pod{rbRolledBack("web-0"), rbCarrying(runningPod("web-1", imageV2), rbEdit(rbState(inplace.StageUpdated, 1), func(s *inplace.State) { s.Containers[0].BeforeImage = "reg.example/evil:v1" }))},
			want: rbNeedsPerson, rolledBack: 1, says: []string{"rollback incomplete, a person must look: pod shop/web-1: container \"app\" would go back to reg.example/evil:v1"}},
		{name: "pods still to revert say who needs a person", pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUnreadable(rbCarrying(runningPod("web-1", imageV2), rbState(inplace.StageUpdated, 1)))},
			want: rbRevert, work: []string{"web-0"}, updating: 1, says: []string{"0 pods reverted, 1 to go: pod web-0 failed; 1 pods need a person: pod shop/web-1: annotation inplace-rollout.io/state is not valid JSON"}},
		{name: "an unreadable state on a pod the rollout did not touch is skipped", pods: []*corev1.Pod{rbRolledBack("web-0"), rbUnreadable(runningPod("web-1", imageV1))},
			want: rbRestore, rolledBack: 1, says: []string{"rolled back 1 pods", "; skipped web-1: state annotation inplace-rollout.io/state unreadable, and not touched by the rollout"}},
		{name: "an unreadable state on a pod at the new revision is for a person", pods: []*corev1.Pod{rbRolledBack("web-0"), rbUnreadable(rbCarrying(runningPod("web-1", imageV1), rbState(inplace.StageUpdated, 1)))},
			want: rbNeedsPerson, rolledBack: 1, says: []string{"a person must look: pod shop/web-1: annotation"}},
		{name: "a touched pod that lost its state and left the workload is for a person", pods: []*corev1.Pod{rbRolledBack("web-0")},
			others: []*corev1.Pod{rbOwnedBy(runningPod("web-3", imageV2), "other")}, lock: touched("web-0", "web-3"),
			want: rbNeedsPerson, rolledBack: 1,
			says: []string{"a person must look: pod web-3 was updated by rollout r2 and still runs reg.example/app:v2, but its state annotation inplace-rollout.io/state is gone, and ReplicaSet other owns it"}},
		{name: "pods touched beyond those the lock names, not found", pods: []*corev1.Pod{rbRolledBack("web-0"), rbRolledBack("web-1")},
			lock: func(l *Record) { touched("web-0")(l); l.TouchedMore = 3 }, want: rbRestore, rolledBack: 2,
			says: []string{"rolled back 2 pods", "; 2 of the pods set out to update beyond the 1 the lock names were not found by their state (a pod never written has none): look for pods still on {\"app\":\"reg.example/app:v2\"}"}},

		// The end: puller pods go, then the workload is restored.
		{name: "puller pods left are removed first", pods: []*corev1.Pod{rbRolledBack("web-0"), rbFailedRevert("web-1", false)},
			others: []*corev1.Pod{rbPuller(rbRollout, "node-1"), rbPuller("r9", "node-1")},
			want:   rbRemovePullers, rolledBack: 1, says: []string{"rolling back: removing the puller pods"}},
		{name: "puller pods being deleted are gone already", pods: []*corev1.Pod{rbRolledBack("web-0")}, others: []*corev1.Pod{rbDeleting(rbPuller(rbRollout, "node-1"))},
			want: rbRestore, rolledBack: 1},
		{name: "every pod back: the workload is restored", pods: []*corev1.Pod{rbRolledBack("web-0"), rbRolledBack("web-1"), runningPod("web-2", imageV1)},
			want: rbRestore, rolledBack: 2,
			says: []string{"rolled back 2 pods; StatefulSet shop/web restored to its previous images ({\"app\":\"reg.example/app:v1\"}): pod web-0 failed"}},
		{name: "a template someone else changed stays theirs", pods: []*corev1.Pod{rbRolledBack("web-0")},
			w: func(w *stubWorkload) { w.template.Spec.Containers[0].Image = imageV3 }, want: rbRestore, rolledBack: 1,
			says: []string{"rolled back 1 pods to {\"app\":\"reg.example/app:v1\"}; the template keeps {\"app\":\"reg.example/app:v3\"}, set by someone else during the rollout"}},
		{name: "a template someone else changed goes back when asked", pods: []*corev1.Pod{rbRolledBack("web-0")},
			w: func(w *stubWorkload) { w.template.Spec.Containers[0].Image = imageV3 }, spec: func(s *RollbackSpec) { s.RestoreTemplate = true },
			want: rbRestore, rolledBack: 1, says: []string{"rolled back 1 pods; StatefulSet shop/web restored to its previous images"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, lock := rbWorkload(), rbLock()
			if tt.w != nil {
				tt.w(w)
			}
			if tt.lock != nil {
				tt.lock(lock)
			}
			spec := RollbackSpec{Target: w.ref, Holder: testOwner, MaxUnavailable: intstr.FromInt32(2), Timeout: time.Minute}
			if tt.spec != nil {
				tt.spec(&spec)
			}
			byName := map[string]*corev1.Pod{}
			for _, p := range append(slices.Clone(tt.pods), tt.others...) {
				byName[p.Name] = p
			}
			c, err := observeRollback(w, lock, tt.pods, byName, t0)
			if err != nil {
				t.Fatal(err)
			}
			d, err := decideRollback(c, spec, lock, t0)
			if err != nil {
				t.Fatal(err)
			}
			if d.action != tt.want || !slices.Equal(podNames(d.work), tt.work) {
				t.Fatalf("action %d on %v, want %d on %v (message %q)", d.action, podNames(d.work), tt.want, tt.work, d.message)
			}
			if d.rolledBack != tt.rolledBack || d.updating != tt.updating {
				t.Errorf("%d rolled back, %d updating; want %d, %d", d.rolledBack, d.updating, tt.rolledBack, tt.updating)
			}
			rest := d.message
			for _, s := range tt.says {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("message %q does not say %q (in order)", d.message, s)
				}
				rest = rest[i+len(s):]
			}
		})
	}
}

// TestLostPods: the pods the lock names that the rollback did not find by their state are for a
// person only while they still run an image the rollout put there.
func TestLostPods(t *testing.T) {
	named := func(l *Record, names ...string) *Record {
		for _, n := range names {
			l.Touched = append(l.Touched, TouchedPod{Name: n, UID: types.UID("uid-" + n)})
		}
		return l
	}
	tests := []struct {
		name  string
		lock  *Record
		pods  []*corev1.Pod
		found []string
		// lost are in the pods' messages, one each; note is in the note, empty for none.
		lost []string
		note string
	}{
		{name: "a pod found by its state", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{rbUpdated("web-0", 0)}, found: []string{"web-0"}},
		{name: "a pod deleted since", lock: named(rbLock(), "web-0")},
		{name: "another pod under the name", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{rbEdit(runningPod("web-0", imageV2), func(p *corev1.Pod) { p.UID = "uid-web-0-new" })}},
		{name: "a pod being deleted", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{rbDeleting(runningPod("web-0", imageV2))}},
		{name: "a pod that ended", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{rbEdit(runningPod("web-0", imageV2), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })}},
		{name: "a pod back on its before image", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{runningPod("web-0", imageV1)}},
		{name: "a pod on another before image the lock records", lock: rbEdit(named(rbLock(), "web-0"), func(l *Record) { l.BeforeImages[testApp] = append(l.BeforeImages[testApp], imageV3) }),
			pods: []*corev1.Pod{runningPod("web-0", imageV3)}},
		{name: "state removed", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{runningPod("web-0", imageV2)},
			lost: []string{"pod web-0 was updated by rollout r2 and still runs reg.example/app:v2, but its state annotation inplace-rollout.io/state is gone; put its images back by hand ({\"app\":\"reg.example/app:v1\"}), then run rollback again"}},
		{name: "state of another rollout", lock: named(rbLock(), "web-0"), pods: []*corev1.Pod{rbCarrying(runningPod("web-0", imageV2), rbEdit(rbState(inplace.StageUpdated, 0), func(s *inplace.State) { s.RolloutID = "r9" }))},
			lost: []string{"but its state names rollout r9;"}},
		{name: "gone to another owner", lock: named(rbLock(), "web-0", "web-1"), pods: []*corev1.Pod{rbOwnedBy(runningPod("web-0", imageV2), "other"), runningPod("web-1", imageV1)},
			lost: []string{"pod web-0 was updated by rollout r2 and still runs reg.example/app:v2, but its state annotation inplace-rollout.io/state is gone, and ReplicaSet other owns it;"}},
		{name: "an init container on the rollout's image", lock: rbEdit(named(rbLock(), "web-0"), func(l *Record) { l.Images["setup"] = "reg.example/setup:v2" }),
			pods: []*corev1.Pod{rbEdit(runningPod("web-0", imageV1), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "reg.example/setup:v2"}}
			})},
			lost: []string{"still runs reg.example/setup:v2"}},
		{name: "resources removed with the state", lock: rbEdit(named(rbLock(), "web-0", "web-1"), func(l *Record) {
			l.Images, l.PreviousImages = nil, nil
			l.Resources = map[string]inplace.Resources{testApp: resourcesOf("cpu=500m", "")}
			l.PreviousResources = map[string]inplace.Resources{testApp: resourcesOf("cpu=250m", "")}
		}),
			pods: []*corev1.Pod{
				rbEdit(runningPod("web-0", imageV1), func(p *corev1.Pod) { p.Spec.Containers[0].Resources = resourcesOf("cpu=0.5", "cpu=1") }),
				rbEdit(runningPod("web-1", imageV1), func(p *corev1.Pod) { p.Spec.Containers[0].Resources = resourcesOf("cpu=250m", "cpu=1") }),
			},
			lost: []string{"pod web-0 was updated by rollout r2 and still runs container app with resources requests cpu=500m, but its state annotation inplace-rollout.io/state is gone; put its images and resources back by hand ({\"resources\":{\"app\":{\"requests\":{\"cpu\":\"250m\"}}}})"}},
		{name: "pods beyond those named, all found", lock: rbEdit(named(rbLock(), "web-0"), func(l *Record) { l.TouchedMore = 2 }),
			pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUpdated("web-1", 1), rbUpdated("web-2", 2)}, found: []string{"web-0", "web-1", "web-2"}},
		{name: "pods beyond those named, some not found", lock: rbEdit(named(rbLock(), "web-0"), func(l *Record) { l.TouchedMore = 2 }),
			pods: []*corev1.Pod{rbUpdated("web-0", 0), rbUpdated("web-1", 1)}, found: []string{"web-0", "web-1"},
			note: "; 1 of the pods set out to update beyond the 1 the lock names were not found by their state (a pod never written has none): look for pods still on {\"app\":\"reg.example/app:v2\"}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			byName := map[string]*corev1.Pod{}
			for _, p := range tt.pods {
				byName[p.Name] = p
			}
			found := map[types.UID]bool{}
			for _, n := range tt.found {
				found[byName[n].UID] = true
			}
			lost, note := lostPods(tt.lock, lockBeforeImages(tt.lock), byName, found)
			if len(lost) != len(tt.lost) {
				t.Fatalf("lost %q, want %d saying %q", lost, len(tt.lost), tt.lost)
			}
			for i, want := range tt.lost {
				if !strings.Contains(lost[i], want) {
					t.Errorf("lost[%d] = %q, want it to say %q", i, lost[i], want)
				}
			}
			if note != tt.note {
				t.Errorf("note %q, want %q", note, tt.note)
			}
		})
	}
}

// TestUntouched: a pod whose state cannot be read is passed over by a rollback only when its
// spec and labels show that the rollout never changed it.
func TestUntouched(t *testing.T) {
	atNew := func(p *corev1.Pod) *corev1.Pod {
		p.Labels[appsv1.ControllerRevisionHashLabelKey] = newRevision
		return p
	}
	tests := []struct {
		name string
		w    func(*stubWorkload)
		pod  *corev1.Pod
		want bool
	}{
		{name: "on the before image, at the old revision", pod: runningPod("web-0", imageV1), want: true},
		{name: "on the rollout's image", pod: runningPod("web-0", imageV2)},
		{name: "on an image the lock does not record", pod: runningPod("web-0", imageV3)},
		{name: "on the before image, at the new revision", pod: atNew(runningPod("web-0", imageV1))},
		{name: "a container the rollout leaves alone on another image", pod: rbEdit(runningPod("web-0", imageV1), func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "mesh", Image: "reg.example/mesh:v9"})
		}), want: true},
		{name: "the controller has not computed the new revision", w: func(w *stubWorkload) { w.labels, w.labelsOK = nil, false }, pod: atNew(runningPod("web-0", imageV1)), want: true},
		{name: "no revision labels (Deployment, label-selected pods)", w: func(w *stubWorkload) { w.labels = map[string]string{} }, pod: atNew(runningPod("web-0", imageV1)), want: true},
		{name: "the revision labels cannot be told", w: func(w *stubWorkload) { w.labels, w.labelsOK, w.labelsErr = nil, false, errors.New("no revision") },
			pod: runningPod("web-0", imageV1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, lock := rbWorkload(), rbLock()
			if tt.w != nil {
				tt.w(w)
			}
			if got := untouched(w, lock, lockBeforeImages(lock), tt.pod); got != tt.want {
				t.Errorf("untouched = %v, want %v", got, tt.want)
			}
		})
	}
}
