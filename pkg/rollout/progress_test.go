package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

func TestUnreadySince(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := func(created time.Time, ready *corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		if ready != nil {
			p.Status.Conditions = []corev1.PodCondition{*ready}
		}
		return p
	}
	cond := func(s corev1.ConditionStatus, at time.Time) *corev1.PodCondition {
		return &corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"not Ready since before the start", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start.Add(-time.Minute))), true},
		{"not Ready since the same second", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start)), true},
		{"went down during the rollout", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start.Add(time.Second))), false},
		{"Ready", pod(start.Add(-time.Hour), cond(corev1.ConditionTrue, start.Add(-time.Minute))), false},
		{"no condition, created before", pod(start.Add(-time.Hour), nil), true},
		{"no condition, created during the rollout", pod(start.Add(time.Minute), nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unreadySince(tt.pod, start); got != tt.want {
				t.Errorf("unreadySince = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDecideProgress: the next step of a progressing rollout, decided from what observe saw.
// Ten pods, batches 1,50%,100% (1, 5, 10) unless a case says otherwise.
func TestDecideProgress(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Hour)
	readyPod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(started.Add(-time.Hour))},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	downSince := func(name string, at time.Time) *corev1.Pod {
		p := readyPod(name)
		p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}
		return p
	}
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return out
	}
	pending := func(n int) []*corev1.Pod {
		out := make([]*corev1.Pod, n)
		for i := range out {
			out[i] = readyPod(fmt.Sprintf("p%d", i))
		}
		return out
	}
	// census of u updated pods and p pending ones, nothing in flight.
	at := func(u, p int) *census {
		return &census{updated: names("u", u), pending: pending(p), batchDone: now.Add(-time.Minute)}
	}
	with := func(c *census, f func(*census)) *census { f(c); return c }
	crashing := podState{
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "u0"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", RestartCount: 3, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}},
		state: &inplace.State{Stage: inplace.StageUpdated, Containers: []inplace.ContainerState{{Name: "app", RestartsBefore: 0}}},
	}
	batches := []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("50%"), intstr.FromString("100%")}
	// The progress deadline is one no batch reaches unless a case says so: every batch of the
	// census last made progress a minute ago.
	spec := Spec{Batches: batches, MaxUnavailable: intstr.FromInt32(2), Timeout: 10 * time.Minute}
	analysed := spec
	analysed.Analysis = &analysis.Config{}
	upTo := func(s Spec, v intstr.IntOrString) Spec { s.UpTo = &v; return s }
	soaked := spec
	soaked.Soak = 5 * time.Minute
	lock := func(phase Phase, accepted int) *Record {
		return &Record{Phase: phase, AcceptedPods: accepted, AcceptedAll: accepted >= 10, StartedAt: started}
	}
	progressing := lock(PhaseProgressing, 0)

	tests := []struct {
		name   string
		c      *census
		spec   Spec
		lock   *Record
		want   action
		code   Reason
		batch  int // 1-based, as in Status
		work   int
		detail string // in the reason
	}{
		// Rollback causes decided here: the rest (analysis verdicts, a pod that cannot be
		// updated in place, a batch that cannot start) are decided with what their step learns.
		{name: "a pod failed its update", c: with(at(2, 8), func(c *census) {
			c.failed = []podFailure{{"p0", inplace.FailureCrashLoop, "CrashLoopBackOff"}}
		}),
			spec: spec, lock: progressing, want: actRollBack, code: ReasonPodFailed, batch: 2, detail: "CrashLoopBackOff"},
		{name: "every failed pod missed its progress deadline", c: with(at(2, 8), func(c *census) {
			c.failed = []podFailure{{"p0", inplace.FailureDeadlineExceeded, "ProgressDeadlineExceeded: ..."}}
		}),
			spec: spec, lock: progressing, want: actRollBack, code: ReasonDeadlineExceeded, batch: 2, detail: "ProgressDeadlineExceeded"},
		{name: "a pod crashed during its batch's soak", c: with(at(1, 9), func(c *census) { c.soaking = []podState{crashing} }),
			spec: soaked, lock: progressing, want: actRollBack, code: ReasonPodFailed, batch: 1, detail: "during the soak of batch 1"},

		{name: "a pod crashed after its batch's soak", c: with(at(1, 9), func(c *census) { c.soaking = []podState{crashing}; c.batchDone = now.Add(-time.Hour) }),
			spec: soaked, lock: progressing, want: actRollBack, code: ReasonPodFailed, batch: 2, detail: "u0 failed after its update"},
		{name: "a pod crashed after its update, with no soak", c: with(at(1, 9), func(c *census) { c.soaking = []podState{crashing} }),
			spec: spec, lock: progressing, want: actRollBack, code: ReasonPodFailed, batch: 2, detail: "CrashLoopBackOff"},
		{name: "a complete batch soaks", c: at(1, 9), spec: soaked, lock: progressing, want: actSoak, batch: 1},
		{name: "the soak is over: the next batch starts", c: with(at(1, 9), func(c *census) { c.batchDone = now.Add(-time.Hour) }),
			spec: soaked, lock: progressing, want: actStep, batch: 2, work: 2},
		{name: "a complete batch is analysed", c: at(1, 9), spec: analysed, lock: progressing, want: actAnalyze, batch: 1},
		{name: "no analysis while a pod is in flight", c: with(at(1, 8), func(c *census) { c.inflight = pending(1) }),
			spec: analysed, lock: progressing, want: actStep, batch: 1, work: 1},
		{name: "an accepted batch is not analysed again", c: at(1, 9), spec: analysed, lock: lock(PhaseProgressing, 1), want: actStep, batch: 2, work: 2},
		{name: "the next batch waits for the analysis of the one before", c: at(3, 7), spec: analysed, lock: progressing, want: actAnalyze, batch: 1},
		{name: "acceptance is a pod count: a changed batch list analyses its first batch ending above it", c: at(5, 5),
			spec: func() Spec {
				s := analysed
				s.Batches = []intstr.IntOrString{intstr.FromInt32(3), intstr.FromString("50%"), intstr.FromString("100%")}
				return s
			}(),
			lock: lock(PhaseProgressing, 1), want: actAnalyze, batch: 1},
		{name: "acceptance is a pod count: fewer batches than were accepted still analyse the last", c: at(10, 0),
			spec: func() Spec {
				s := analysed
				s.Batches = []intstr.IntOrString{intstr.FromString("50%"), intstr.FromString("100%")}
				return s
			}(),
			lock: lock(PhaseProgressing, 5), want: actAnalyze, batch: 2},

		{name: "hold point reached", c: at(5, 5), spec: upTo(spec, intstr.FromString("50%")), lock: progressing, want: actHold, batch: 2},
		{name: "hold point reached, still analysed first", c: at(5, 5), spec: upTo(analysed, intstr.FromString("50%")), lock: lock(PhaseProgressing, 1), want: actAnalyze, batch: 2},
		{name: "hold point reached and accepted", c: at(5, 5), spec: upTo(analysed, intstr.FromString("50%")), lock: lock(PhaseProgressing, 5), want: actHold, batch: 2},
		{name: "a hold point between batches ends a batch of its own", c: at(2, 8), spec: upTo(spec, intstr.FromInt32(3)), lock: progressing, want: actStep, batch: 2, work: 1},
		{name: "a lower hold point than reached holds where it is", c: at(5, 5), spec: upTo(spec, intstr.FromInt32(1)), lock: lock(PhaseHolding, 0), want: actHold, batch: 1},
		{name: "a higher hold point moves on", c: at(5, 5), spec: upTo(spec, intstr.FromString("100%")), lock: lock(PhaseHolding, 0), want: actMoveOn, batch: 3},
		{name: "no hold point moves on", c: at(5, 5), spec: spec, lock: lock(PhaseHolding, 0), want: actMoveOn, batch: 3},

		{name: "every pod updated: finalize", c: at(10, 0), spec: spec, lock: progressing, want: actFinalize, batch: 3},
		{name: "every pod updated, the last batch not analysed", c: at(10, 0), spec: analysed, lock: lock(PhaseProgressing, 5), want: actAnalyze, batch: 3},
		{name: "every pod updated and accepted: finalize", c: at(10, 0), spec: analysed, lock: lock(PhaseProgressing, 10), want: actFinalize, batch: 3},
		{name: "scaled down below the pods accepted, the last batch is still analysed", c: at(10, 0), spec: analysed,
			lock: &Record{Phase: PhaseProgressing, AcceptedPods: 12, StartedAt: started}, want: actAnalyze, batch: 3},
		{name: "a hold point lowered below the pods in flight starts no pod", c: with(at(3, 6), func(c *census) { c.inflight = pending(1) }),
			spec: upTo(spec, intstr.FromInt32(2)), lock: progressing, want: actStep, batch: 3, work: 1},
		{name: "a pod arriving from the new template holds the finalize", c: with(at(9, 0), func(c *census) { c.arriving = pending(1); c.down = []string{"p0"} }),
			spec: spec, lock: progressing, want: actStep, batch: 3, work: 0},

		{name: "max-unavailable bounds the pods started", c: at(1, 9), spec: spec, lock: progressing, want: actStep, batch: 2, work: 2},
		{name: "pods down count against max-unavailable", c: with(at(1, 9), func(c *census) { c.down = []string{"x"} }), spec: spec, lock: progressing, want: actStep, batch: 2, work: 1},
		{name: "missing pods count against max-unavailable", c: with(at(1, 9), func(c *census) { c.missing = 2 }), spec: spec, lock: progressing, want: actStep, batch: 2, work: 0},
		{name: "a pod down since before the start takes no budget", c: with(at(1, 9), func(c *census) { c.pending[0] = downSince("p0", started.Add(-time.Minute)) }),
			spec: spec, lock: progressing, want: actStep, batch: 2, work: 3},
		{name: "the batch end bounds the pods started", c: at(4, 6), spec: spec, lock: progressing, want: actStep, batch: 2, work: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := decideProgress(tt.c, tt.spec, tt.lock, 10, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.action != tt.want || d.batch+1 != tt.batch {
				t.Fatalf("action %d at batch %d, want %d at batch %d (counts %v)", d.action, d.batch+1, tt.want, tt.batch, d.counts)
			}
			if d.code() != tt.code || !strings.Contains(d.reason, tt.detail) {
				t.Errorf("reason %s %q, want %s with %q", d.code(), d.reason, tt.code, tt.detail)
			}
			if tt.want == actStep && len(d.work) != tt.work {
				t.Errorf("%d pods to step, want %d", len(d.work), tt.work)
			}
		})
	}
}

func TestWithHoldPoint(t *testing.T) {
	tests := []struct {
		counts []int
		upTo   int
		want   []int
	}{
		{[]int{1, 5, 10}, 5, []int{1, 5, 10}},
		{[]int{1, 5, 10}, 3, []int{1, 3, 5, 10}},
		{[]int{10}, 5, []int{5, 10}},
		{[]int{1, 5, 10}, 10, []int{1, 5, 10}},
	}
	for _, tt := range tests {
		if got := withHoldPoint(tt.counts, tt.upTo); !slices.Equal(got, tt.want) {
			t.Errorf("withHoldPoint(%v, %d) = %v, want %v", tt.counts, tt.upTo, got, tt.want)
		}
	}
}

func TestResolveUpTo(t *testing.T) {
	v := func(s string) *intstr.IntOrString { x := intstr.Parse(s); return &x }
	tests := []struct {
		upTo    *intstr.IntOrString
		want    int
		wantErr string
	}{
		{nil, 10, ""},
		{v("3"), 3, ""},
		{v("30"), 10, ""},
		{v("25%"), 3, ""},
		{v("100%"), 10, ""},
		{v("0"), 0, "above 0"},
		{v("0%"), 0, "between 0 and 100%"},
		{v("150%"), 0, "between 0 and 100%"},
		{v("half"), 0, "between 0 and 100%"},
		{v("NaN%"), 0, "between 0 and 100%"},
	}
	for _, tt := range tests {
		got, err := resolveUpTo(tt.upTo, 10)
		if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) || got != tt.want {
			t.Errorf("resolveUpTo(%v) = %d, %v; want %d, error with %q", tt.upTo, got, err, tt.want, tt.wantErr)
		}
	}
}

// BenchmarkDecideProgress decides the next step of a 5,000-pod rollout half way through its
// second batch, with analysis: what one Reconcile spends deciding, apart from reading the pods.
func BenchmarkDecideProgress(b *testing.B) {
	const total = 5000
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &census{batchDone: now.Add(-time.Hour)}
	for i := range total {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		if i < 1500 {
			c.updated = append(c.updated, p.Name)
		} else {
			c.pending = append(c.pending, p)
		}
	}
	spec := Spec{Batches: []intstr.IntOrString{intstr.FromString("10%"), intstr.FromString("50%"), intstr.FromString("100%")},
		MaxUnavailable: intstr.FromString("2%"), Timeout: time.Minute, Analysis: &analysis.Config{}}
	lock := &Record{Phase: PhaseProgressing, AcceptedPods: 500, StartedAt: now.Add(-2 * time.Hour)}
	b.ReportAllocs()
	for b.Loop() {
		d, err := decideProgress(c, spec, lock, total, now)
		if err != nil || d.action != actStep || len(d.work) != 100 {
			b.Fatalf("%v, %d pods to step: %v", d.action, len(d.work), err)
		}
	}
}

// BenchmarkObserveThroughWatch observes a 5,000-pod StatefulSet half way through its rollout in
// 10 batches, its pods read from a synced watch as the CLI reads them: what every step of the
// command spends reading the workload and sorting its pods, apart from deciding and writing.
func BenchmarkObserveThroughWatch(b *testing.B) {
	const total = 5000
	fc := newFakeCluster(b, clusterOpts{pods: total})
	spec := fc.spec(imageV2, tenPercentBatches()...)
	spec.MaxUnavailable = intstr.FromString("10%")
	e, w, ctx := watchedEngine(b, fc, spec)
	st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated >= total/2 })
	sel := labels.SelectorFromSet(labels.Set{"app": testName})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		pods, err := w.ListPods(ctx, testNS, sel)
		if err != nil {
			b.Fatal(err)
		}
		if caughtUp(pods, fc.pods()) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the watch did not catch up with the API server's pods within a minute")
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		wl, lock, err := e.load(ctx, spec.Target)
		if err != nil {
			b.Fatal(err)
		}
		c, err := e.observe(ctx, spec, wl, lock, fc.now)
		if err != nil || len(c.updated) < st.Updated {
			b.Fatalf("observed %d pods updated, want at least %d: %v", len(c.updated), st.Updated, err)
		}
	}
}

// tenPercentBatches are the batches 10%, 20%, ... 100%.
func tenPercentBatches() []intstr.IntOrString {
	var batches []intstr.IntOrString
	for i := 1; i <= 10; i++ {
		batches = append(batches, intstr.FromString(fmt.Sprintf("%d%%", 10*i)))
	}
	return batches
}
