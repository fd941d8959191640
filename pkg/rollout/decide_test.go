package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// decideCensus is the census of a ten-pod workload with u pods updated and p pending, each on
// node-1, updating to imageV2; nothing in flight, and the batch's last pod updated at done.
func decideCensus(u, p int, done time.Time) *census {
	c := &census{batchDone: done, refused: map[string]*inplace.IneligibleError{}, waiting: map[string]bool{},
		target: inplace.Target{RolloutID: "r1", Images: map[string]string{testApp: imageV2}}}
	for i := range u {
		c.updated = append(c.updated, fmt.Sprintf("u%d", i))
	}
	for i := range p {
		c.pending = append(c.pending, runningPod(fmt.Sprintf("p%d", i), imageV1))
	}
	return c
}

// TestRollbackCausesDecided: every cause of a rollback, each a row of this one table with the
// reason it reports, decided from the census alone; and, beside them, what does not roll back.
// Ten pods, batches 1, 50%, 100% (1, 5, 10), max-unavailable 2, a 10m progress deadline.
func TestRollbackCausesDecided(t *testing.T) {
	now := t0
	lock := &Record{Phase: PhaseProgressing, StartedAt: now.Add(-30 * time.Minute)}
	spec := Spec{Batches: []intstr.IntOrString{one, intstr.FromString("50%"), all}, MaxUnavailable: intstr.FromInt32(2), Timeout: 10 * time.Minute}
	recent, stalled := now.Add(-time.Minute), now.Add(-11*time.Minute)
	crashing := func(c *census) {
		p := runningPod("u0", imageV2)
		p.Status.ContainerStatuses[0].RestartCount = 3
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}
		c.soaking = []podState{{p, &inplace.State{Stage: inplace.StageUpdated, Containers: []inplace.ContainerState{{Name: testApp}}}}}
	}
	unscheduled := func(names ...string) func(*census) {
		return func(c *census) {
			for _, p := range c.pending {
				if slices.Contains(names, p.Name) {
					p.Spec.NodeName = ""
					c.waiting[p.Name] = true
				}
			}
		}
	}
	never := func(name string) func(*census) {
		return func(c *census) {
			c.refused[name] = &inplace.IneligibleError{Pod: testNS + "/" + name, Reason: "its restartPolicy is Never; only Always restarts a container on an image change"}
		}
	}
	measured := func(v analysis.Verdict) func(*census) {
		return func(c *census) {
			c.measured = &analysis.Run{Batch: 1, Pods: 1, Verdict: v, Reason: "error ratio 0.2 above 0.05"}
		}
	}
	analysed := func(s *Spec) { s.Analysis = &analysis.Config{} }
	tests := []struct {
		cause  rollbackCause // "" when the rollout does not roll back
		name   string
		census func(*census)
		done   time.Time // the batch's last pod updated; recent unless set
		spec   func(*Spec)
		want   action // when not rolling back
		detail string // in the reason
	}{
		{cause: causePodFailed, name: "a pod failed its update",
			census: func(c *census) {
				c.failed = []podFailure{{"p0", inplace.FailureCrashLoop, "CrashLoopBackOff: container \"app\": back-off"}}
			},
			detail: "pod p0: CrashLoopBackOff: container \"app\": back-off"},
		{cause: causePodFailed, name: "pods failed, not all on their deadline", census: func(c *census) {
			c.failed = []podFailure{{"p0", inplace.FailureDeadlineExceeded, "ProgressDeadlineExceeded: no progress"}, {"p1", inplace.FailureImagePull, "ImagePullBackOff"}}
		}, detail: "pod p0: ProgressDeadlineExceeded: no progress; pod p1: ImagePullBackOff"},
		{cause: causePodDeadline, name: "every failed pod missed its progress deadline", census: func(c *census) {
			c.failed = []podFailure{{"p0", inplace.FailureDeadlineExceeded, "ProgressDeadlineExceeded: no progress within 10m0s"}}
		}, detail: "pod p0: ProgressDeadlineExceeded"},
		{cause: causeBatchStalled, name: "no pod of the batch could start within the deadline", census: unscheduled("p0", "p1"), done: stalled,
			detail: "ProgressDeadlineExceeded: batch 2/3 made no progress within 10m0s: pod shop/p0 cannot be updated in place: it is not scheduled to a node yet (and 8 more pods waiting)"},
		{cause: causeBatchStalled, name: "pods down left no room within the deadline", census: func(c *census) { c.down = []string{"x0", "x1"} }, done: stalled,
			detail: "2 pods down (x0, x1) and max-unavailable is 2, so no more pod may start (and 9 pods wait)"},
		{name: "a pod that can start does not stall the batch", census: unscheduled("p0"), done: stalled, want: actStep},
		{name: "no pod can start, within the deadline", census: unscheduled("p0", "p1"), want: actStep},
		{cause: causeIneligible, name: "a pod to start can never be updated in place", census: never("p1"),
			detail: "pod shop/p1 cannot be updated in place: its restartPolicy is Never"},
		{name: "a pod that can never be updated waits its turn", census: never("p5"), want: actStep},
		{cause: causeFailedInSoak, name: "a pod failed during its batch's soak", census: crashing, spec: func(s *Spec) { s.Soak = 5 * time.Minute },
			detail: "pod u0 failed during the soak of batch 1: CrashLoopBackOff"},
		{cause: causeFailedAfterUpdate, name: "a pod failed after its batch's soak", census: crashing, spec: func(s *Spec) { s.Soak = time.Second },
			detail: "pod u0 failed after its update: CrashLoopBackOff"},
		{cause: causeAnalysisFailed, name: "the analysis failed", census: measured(analysis.Fail), spec: analysed,
			detail: "analysis of batch 1: Fail: error ratio 0.2 above 0.05"},
		{cause: causeAnalysisFailed, name: "the analysis could not measure", census: measured(analysis.Error), spec: analysed, detail: "analysis of batch 1: Error"},
		{cause: causeAnalysisInconclusive, name: "the analysis was inconclusive, and that fails", census: measured(analysis.Inconclusive),
			spec: func(s *Spec) { analysed(s); s.OnInconclusive = InconclusiveFail }, detail: "analysis of batch 1: Inconclusive"},
		{name: "the analysis was inconclusive, and that pauses", census: measured(analysis.Inconclusive), spec: analysed, want: actPause},
		{cause: causePrePullFailed, name: "the new images could not be pulled", census: func(c *census) {
			c.pullers = []corev1.Pod{puller("node-1", corev1.PodPending, "ErrImagePull")}
		}, spec: func(s *Spec) { s.PrePull = true }, detail: "pre-pull failed, before any pod of the batch restarted: pulling reg.example/app:v2 on node node-1: ErrImagePull"},
		{name: "someone else changed the template: the rollout halts", census: func(c *census) {
			*c = census{foreign: &workload.Change{Images: map[string]string{testApp: "reg.example/app:v3"}}}
		},
			want: actHalt},
	}
	seen := map[rollbackCause]bool{}
	for _, tt := range tests {
		seen[tt.cause] = true
		t.Run(tt.name, func(t *testing.T) {
			done := tt.done
			if done.IsZero() {
				done = recent
			}
			c := decideCensus(1, 9, done)
			tt.census(c)
			s := spec
			if tt.spec != nil {
				tt.spec(&s)
			}
			d, err := decideProgress(c, s, lock, 10, now)
			if err != nil {
				t.Fatal(err)
			}
			if tt.cause == "" {
				if d.action != tt.want {
					t.Fatalf("action %d (%s %q), want %d", d.action, d.cause, d.reason, tt.want)
				}
				return
			}
			if d.action != actRollBack || d.cause != tt.cause || d.code() != rollbackCauses[tt.cause] || !strings.Contains(d.reason, tt.detail) {
				t.Fatalf("action %d, cause %s, code %s, reason %q; want a rollback for %s (%s) saying %q", d.action, d.cause, d.code(), d.reason, tt.cause, rollbackCauses[tt.cause], tt.detail)
			}
		})
	}
	for _, cause := range slices.Sorted(maps.Keys(rollbackCauses)) {
		if !seen[cause] {
			t.Errorf("no row decides a rollback for %s", cause)
		}
	}
}

// TestDecideVerdict: what an analysis verdict calls for, with each OnInconclusive.
func TestDecideVerdict(t *testing.T) {
	tests := []struct {
		verdict        analysis.Verdict
		onInconclusive string
		want           verdictOutcome
		cause          rollbackCause
	}{
		{"", "", verdictPending, ""},
		{analysis.Pass, "", verdictPass, ""},
		{analysis.Pass, InconclusiveFail, verdictPass, ""},
		{analysis.Fail, "", verdictFail, causeAnalysisFailed},
		{analysis.Fail, InconclusiveContinue, verdictFail, causeAnalysisFailed},
		{analysis.Error, "", verdictFail, causeAnalysisFailed},
		{analysis.Inconclusive, "", verdictPause, ""},
		{analysis.Inconclusive, InconclusivePause, verdictPause, ""},
		{analysis.Inconclusive, InconclusiveFail, verdictFail, causeAnalysisInconclusive},
		{analysis.Inconclusive, InconclusiveContinue, verdictPass, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s, on inconclusive %q", tt.verdict, tt.onInconclusive), func(t *testing.T) {
			got := decideVerdict(&analysis.Run{Verdict: tt.verdict}, tt.onInconclusive)
			if got.outcome != tt.want || got.cause != tt.cause {
				t.Errorf("decideVerdict = %+v, want outcome %d, cause %q", got, tt.want, tt.cause)
			}
		})
	}
}

// TestDecideWaitsAndWrites: the steps that are neither a rollback nor a pod step, decided from
// the census alone: what comes before the pods, the pre-pull's own writes and waits, and what a
// measurement of the analysis calls for.
func TestDecideWaitsAndWrites(t *testing.T) {
	now := t0
	lock := &Record{Phase: PhaseProgressing, StartedAt: now.Add(-30 * time.Minute)}
	spec := Spec{Batches: []intstr.IntOrString{one, intstr.FromString("50%"), all}, MaxUnavailable: intstr.FromInt32(2), Timeout: 10 * time.Minute}
	prePull := func(s *Spec) { s.PrePull = true }
	analysed := func(s *Spec) { s.Analysis = &analysis.Config{} }
	tests := []struct {
		name   string
		census func(*census)
		spec   func(*Spec)
		want   action
		// work are the pods left to step, unpulled those waiting for their node's pull.
		work, unpulled int
	}{
		{name: "a halted rollout whose template has its images again resumes", census: func(c *census) { *c = census{halted: true} }, want: actResume},
		{name: "a revision not recorded yet is waited for", census: func(c *census) { *c = census{revisionPending: true} }, want: actWaitRevision},
		{name: "a node without a puller gets one", spec: prePull, want: actPull},
		{name: "a puller done with no pod waiting is removed", census: func(c *census) {
			c.pullers = []corev1.Pod{puller("node-1", corev1.PodPending, ""), puller("node-2", corev1.PodSucceeded, "")}
		}, spec: prePull, want: actPull},
		{name: "pods wait for their node's pull", census: func(c *census) { c.pullers = []corev1.Pod{puller("node-1", corev1.PodPending, "")} },
			spec: prePull, want: actWaitPull, unpulled: 2},
		{name: "pods whose node pulled start", census: func(c *census) { c.pullers = []corev1.Pod{puller("node-1", corev1.PodSucceeded, "")} },
			spec: prePull, want: actStep, work: 2},
		{name: "a complete batch is measured", census: func(c *census) { c.pending = c.pending[1:] }, spec: analysed, want: actAnalyze},
		{name: "a measurement with no verdict is recorded", census: func(c *census) { c.measured = &analysis.Run{Batch: 1, Pods: 1} },
			spec: analysed, want: actRecord},
		{name: "a passing measurement accepts the batch", census: func(c *census) { c.measured = &analysis.Run{Batch: 1, Pods: 1, Verdict: analysis.Pass} },
			spec: analysed, want: actPass},
		{name: "an inconclusive one that continues accepts it too", census: func(c *census) {
			c.measured = &analysis.Run{Batch: 1, Pods: 1, Verdict: analysis.Inconclusive}
		}, spec: func(s *Spec) { analysed(s); s.OnInconclusive = InconclusiveContinue }, want: actPass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := decideCensus(1, 9, now.Add(-time.Minute))
			if tt.census != nil {
				tt.census(c)
			}
			s := spec
			if tt.spec != nil {
				tt.spec(&s)
			}
			d, err := decideProgress(c, s, lock, 10, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.action != tt.want || len(d.work) != tt.work && tt.want == actStep || len(d.unpulled) != tt.unpulled {
				t.Fatalf("action %d, %d pods to step, %d unpulled (%s %q); want %d, %d, %d", d.action, len(d.work), len(d.unpulled), d.cause, d.reason, tt.want, tt.work, tt.unpulled)
			}
			if d.run != c.measured {
				t.Errorf("the decision acts on run %+v, want the one measured", d.run)
			}
		})
	}
}

// TestObservedFailures: observe reads how a pod's update failed from the code its state
// records; a state written before states recorded one is read from its reason, as then: a
// rollback is DeadlineExceeded only when every failed pod missed its deadline.
func TestObservedFailures(t *testing.T) {
	lock := &Record{RolloutID: "r1", Phase: PhaseProgressing}
	failed := func(name, raw string) *corev1.Pod {
		p := runningPod(name, imageV2)
		p.Annotations = map[string]string{inplace.StateAnnotation: `{"rolloutID":"r1","stage":"Failed",` + raw +
			`,"containers":[{"name":"app","beforeImage":"reg.example/app:v1","afterImage":"reg.example/app:v2"}]}`}
		return p
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want []inplace.FailureCode
		code Reason
	}{
		{"a recorded code", []*corev1.Pod{failed("p0", `"reason":"ProgressDeadlineExceeded: no progress","failure":"DeadlineExceeded"`)},
			[]inplace.FailureCode{inplace.FailureDeadlineExceeded}, ReasonDeadlineExceeded},
		{"the code, not the words", []*corev1.Pod{failed("p0", `"reason":"ProgressDeadlineExceeded: edited","failure":"CrashLoop"`)},
			[]inplace.FailureCode{inplace.FailureCrashLoop}, ReasonPodFailed},
		{"a state from before codes, past its deadline", []*corev1.Pod{failed("p0", `"reason":"ProgressDeadlineExceeded: no progress within 10m0s"`)},
			[]inplace.FailureCode{inplace.FailureDeadlineExceeded}, ReasonDeadlineExceeded},
		{"states from before codes, one crashing", []*corev1.Pod{
			failed("p0", `"reason":"ProgressDeadlineExceeded: no progress within 10m0s"`),
			failed("p1", `"reason":"CrashLoopBackOff: container \"app\": back-off"`),
		}, []inplace.FailureCode{inplace.FailureDeadlineExceeded, inplace.FailureCrashLoop}, ReasonPodFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &census{read: inplace.ReadState}
			for _, p := range tt.pods {
				// A state of the rollout is sorted without asking the workload anything.
				if err := c.observePod(nil, lock, p, 0, t0); err != nil {
					t.Fatal(err)
				}
			}
			var got []inplace.FailureCode
			for _, f := range c.failed {
				got = append(got, f.code)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("failure codes %v, want %v", got, tt.want)
			}
			var d decision
			if !decideFailure(c, &d) || d.code() != tt.code {
				t.Errorf("rollback %s (%s), want %s", d.code(), d.reason, tt.code)
			}
		})
	}
}

// TestDecideHold: a rollout holds at its hold point, keeps holding while a pod it counted there
// is in flight again (unready for a while: its update's end is judged from the pod), and moves
// on only when the hold point moves.
func TestDecideHold(t *testing.T) {
	now := t0
	half := intstr.FromString("50%")
	holding := &Record{Phase: PhaseHolding, HeldAt: 5, StartedAt: now.Add(-30 * time.Minute)}
	tests := []struct {
		name string
		upTo intstr.IntOrString
		// unready moves an updated pod back in flight.
		unready bool
		want    action
	}{
		{name: "at the hold point: holds", upTo: half, want: actHold},
		{name: "a pod in flight again: it is stepped, the rollout still holding", upTo: half, unready: true, want: actStep},
		{name: "the hold point raised: moves on", upTo: intstr.FromInt32(8), want: actMoveOn},
		{name: "the hold point raised while a pod is in flight: moves on", upTo: all, unready: true, want: actMoveOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Batches: []intstr.IntOrString{one, half, all}, MaxUnavailable: intstr.FromInt32(2), Timeout: 10 * time.Minute, UpTo: &tt.upTo}
			c := decideCensus(5, 5, now.Add(-time.Hour))
			if tt.unready {
				c.updated = c.updated[1:]
				c.inflight = []*corev1.Pod{runningPod("u0", imageV2)}
				c.down = []string{"u0"}
			}
			d, err := decideProgress(c, spec, holding, 10, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.action != tt.want {
				t.Fatalf("action %d (%q), want %d", d.action, d.reason, tt.want)
			}
			if d.action == actStep && (len(d.work) != 1 || d.work[0].Name != "u0") {
				t.Errorf("work %v, want u0 alone: no pod starts past the hold point", podNames(d.work))
			}
		})
	}
}

// TestObserveASupersededUpdate: a superseded rollout's update on a pod keeps it in flight until
// that update is over (inplace.Over): once the kubelet runs the pod's new container, Ready or
// not, the pod is the superseding rollout's to update, down while not Ready.
func TestObserveASupersededUpdate(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 1})
	w, err := workload.Load(context.Background(), fc.client, fc.spec(imageV3).Target)
	if err != nil {
		t.Fatal(err)
	}
	// Superseding started r2 after r1 made the pod unready (patchedBy: 20 s ago): that pod is
	// still down, its budget spent.
	lock := &Record{RolloutID: "r2", Superseded: []string{"r1"}, Phase: PhaseProgressing, StartedAt: t0.Add(-10 * time.Second),
		Images: map[string]string{testApp: imageV3}, PreviousImages: map[string]string{testApp: imageV1}}
	patched := func(acted, ready bool) *corev1.Pod { return patchedBy(t, "r1", acted, ready) }
	tests := []struct {
		name          string
		pod           *corev1.Pod
		inflight      bool
		pending, down bool
	}{
		{"patched, the kubelet has not acted: in flight", patched(false, true), true, false, true},
		{"the new container runs, not Ready: over, pending and down", patched(true, false), false, true, true},
		{"the new container runs Ready: over, pending", patched(true, true), false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &census{target: inplace.Target{Images: lock.Images, RolloutID: lock.RolloutID},
				refused: map[string]*inplace.IneligibleError{}, waiting: map[string]bool{}, read: inplace.ReadState}
			if err := c.observePod(w, lock, tt.pod, 0, t0); err != nil {
				t.Fatal(err)
			}
			if got := len(c.inflight) == 1; got != tt.inflight {
				t.Errorf("in flight: %v, want %v (census %+v)", got, tt.inflight, c)
			}
			if got := len(c.pending) == 1; got != tt.pending {
				t.Errorf("pending: %v, want %v", got, tt.pending)
			}
			if got := len(c.down) == 1; got != tt.down {
				t.Errorf("down: %v, want %v", got, tt.down)
			}
		})
	}
}

// patchedBy is a pod that rollout patched from v1 to v2: the kubelet has acted on the patch (its
// new container runs), or not; the pod is Ready, or not.
func patchedBy(t *testing.T, rollout string, acted, ready bool) *corev1.Pod {
	t.Helper()
	p := runningPod(testName+"-0", imageV1)
	old := p.Status.ContainerStatuses[0]
	old.ContainerID = "containerd://v1"
	p.Status.ContainerStatuses[0] = old
	st := inplace.State{RolloutID: rollout, Stage: inplace.StageUpdating, StartedAt: t0.Add(-30 * time.Second), StageAt: t0.Add(-30 * time.Second),
		Containers: []inplace.ContainerState{{Name: testApp, BeforeImage: imageV1, BeforeImageID: old.ImageID,
			FromContainerID: old.ContainerID, AfterImage: imageV2}}}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{inplace.StateAnnotation: string(raw)}
	p.Spec.Containers[0].Image = imageV2
	if acted {
		cs := &p.Status.ContainerStatuses[0]
		cs.Image, cs.ImageID, cs.ContainerID, cs.RestartCount = imageV2, imageIDOf(imageV2), "containerd://v2", 1
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-20 * time.Second))}}
	}
	if !ready {
		p.Status.ContainerStatuses[0].Ready = false
		p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(-20 * time.Second))}
	}
	return p
}

// TestStray: a rollback takes back, as strays, the running pods on the rollout's images and not
// the previous ones that carry no state of it: none, or another rollout's whose update is over
// (inplace.Over), Ready or not; not one whose update the kubelet has not acted on yet.
func TestStray(t *testing.T) {
	lock := &Record{RolloutID: "r2", Images: map[string]string{testApp: imageV2}, PreviousImages: map[string]string{testApp: imageV1}}
	noState := runningPod(testName+"-0", imageV2)
	tests := []struct {
		name string
		pod  *corev1.Pod
		kind workload.Kind
		want bool
	}{
		{"no state, on the rollout's images", noState, workload.StatefulSet, true},
		{"another rollout's update, not acted on", patchedBy(t, "r0", false, true), workload.StatefulSet, false},
		{"another rollout's update, its container running, not Ready", patchedBy(t, "r0", true, false), workload.StatefulSet, true},
		{"another rollout's update, Ready", patchedBy(t, "r0", true, true), workload.StatefulSet, true},
		{"label-selected pods have no template to come from", noState, workload.Pods, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := inplace.ReadState(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := stray(tt.kind, lock, tt.pod, s, t0); got != tt.want {
				t.Errorf("stray = %v, want %v", got, tt.want)
			}
		})
	}
}
