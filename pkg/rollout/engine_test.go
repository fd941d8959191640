package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var (
	one     = intstr.FromInt32(1)
	half    = intstr.FromString("50%")
	all     = intstr.FromString("100%")
	threeOf = intstr.FromInt32(3)
)

// TestStartRefusals: a rollout that cannot start says why, and nothing on the cluster changes.
func TestStartRefusals(t *testing.T) {
	tests := []struct {
		name  string
		opts  clusterOpts
		setup func(*fakeCluster)
		spec  func(*fakeCluster) Spec
		// want is what the error says; empty when the refusal is a wait (no error).
		want string
		// wait: the controller has not caught up, Reconcile asks to be called again.
		wait bool
	}{
		{
			name: "StatefulSet controller has not recorded a revision",
			opts: clusterOpts{pods: 2},
			setup: func(fc *fakeCluster) {
				sts := fc.sts()
				sts.Status.UpdateRevision = ""
				if _, err := fc.client.AppsV1().StatefulSets(testNS).UpdateStatus(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
					fc.t.Fatal(err)
				}
			},
			wait: true,
		},
		{
			name: "a pod is not Ready",
			opts: clusterOpts{pods: 3},
			setup: func(fc *fakeCluster) {
				p := fc.pod("web-1")
				p.Status.Conditions[0].Status = corev1.ConditionFalse
				fc.updatePod(p)
			},
			want: "1 pods are not Ready (web-1)",
		},
		{
			name: "a pod is at another revision",
			opts: clusterOpts{pods: 2},
			setup: func(fc *fakeCluster) {
				p := fc.pod("web-0")
				p.Labels[appsv1.ControllerRevisionHashLabelKey] = "web-old"
				fc.updatePod(p)
			},
			want: "unfinished rollout: pod web-0 is at revision web-old",
		},
		{
			name: "label-selected pods a controller owns",
			opts: clusterOpts{kind: workload.Pods, pods: 2, owned: true},
			want: "is controlled by StatefulSet/web",
		},
		{
			name: "unreadable state annotation",
			opts: clusterOpts{pods: 2},
			setup: func(fc *fakeCluster) {
				p := fc.pod("web-1")
				p.Annotations = map[string]string{inplace.StateAnnotation: "{not json"}
				fc.updatePod(p)
			},
			want: "restore it or remove it, then run again. Nothing was changed",
		},
		{
			name: "batches that shrink at this pod count",
			opts: clusterOpts{pods: 4},
			spec: func(fc *fakeCluster) Spec { return fc.spec(imageV2, threeOf, half, all) },
			want: "with 4 pods, batch 50% resolves to 2 pods, fewer than the 3 of the batch before it",
		},
		{
			name: "a container the template lacks",
			opts: clusterOpts{pods: 1},
			spec: func(fc *fakeCluster) Spec {
				s := fc.spec(imageV2)
				s.Images = map[string]string{"sidecar": imageV2}
				return s
			},
			want: `no container named "sidecar"`,
		},
		{
			name:  "an init container left alone that runs another image than asked",
			opts:  clusterOpts{pods: 2},
			setup: withInitContainer,
			spec: func(fc *fakeCluster) Spec {
				s := fc.spec(imageV2)
				s.Keep = map[string]string{"setup": "reg.example/setup:v2"}
				return s
			},
			want: `StatefulSet shop/web: init container "setup" runs reg.example/setup:v1, and the pod template the images come from gives it reg.example/setup:v2, which the rollout would leave undone`,
		},
		{
			name:  "label-selected pods with an init container left alone that runs another image than asked",
			opts:  clusterOpts{kind: workload.Pods, pods: 2},
			setup: withInitContainer,
			spec: func(fc *fakeCluster) Spec {
				s := fc.spec(imageV2)
				s.Keep = map[string]string{"setup": "reg.example/setup:v2"}
				return s
			},
			want: `pod shop/web-0: init container "setup" runs reg.example/setup:v1`,
		},
		{
			name: "an init container to leave alone that the template lacks",
			opts: clusterOpts{pods: 1},
			spec: func(fc *fakeCluster) Spec {
				s := fc.spec(imageV2)
				s.Keep = map[string]string{"setup": "reg.example/setup:v1"}
				return s
			},
			want: `StatefulSet shop/web has no init container "setup"`,
		},
		{
			name: "no such workload",
			opts: clusterOpts{pods: 1},
			spec: func(fc *fakeCluster) Spec {
				s := fc.spec(imageV2)
				s.Target.Name = "db"
				return s
			},
			want: "StatefulSet shop/db not found",
		},
		{
			name: "another holder's rollout in flight",
			opts: clusterOpts{pods: 2},
			setup: func(fc *fakeCluster) {
				s := fc.spec(imageV3)
				s.Holder = "argo:shop/web"
				if _, _, err := fc.engine().Reconcile(context.Background(), s, Status{}); err != nil {
					fc.t.Fatal(err)
				}
			},
			want: "is being rolled out by argo:shop/web",
		},
		{
			name: "same holder, other images, no supersede",
			opts: clusterOpts{pods: 2},
			setup: func(fc *fakeCluster) {
				if _, _, err := fc.engine().Reconcile(context.Background(), fc.spec(imageV3), Status{}); err != nil {
					fc.t.Fatal(err)
				}
			},
			want: "supersede it with this rollout, or roll it back first",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, tt.opts)
			if tt.setup != nil {
				tt.setup(fc)
			}
			spec := fc.spec(imageV2)
			if tt.spec != nil {
				spec = tt.spec(fc)
			}
			before := fc.snapshot()
			st, res, err := fc.engine().Reconcile(context.Background(), spec, Status{})
			if tt.wait {
				if err != nil || st.Phase != PhaseProgressing || res <= 0 || st.RolloutID != "" {
					t.Errorf("Reconcile = %+v, %+v, %v; want a wait with a requeue and no rollout", st, res, err)
				}
			} else {
				var inv *InvalidError
				if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Reconcile error = %v (%T), want an InvalidError saying %q", err, err, tt.want)
				}
			}
			if after := fc.snapshot(); after != before {
				t.Errorf("the refused start wrote to the cluster:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestStartAlreadyOnTarget: a workload that runs the images already is reported Succeeded with
// nothing written; a rollout that succeeded is reported again as such.
func TestStartAlreadyOnTarget(t *testing.T) {
	for _, kind := range []workload.Kind{workload.StatefulSet, workload.Pods} {
		t.Run(string(kind), func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: kind, pods: 2})
			before := fc.snapshot()
			st, res, err := fc.engine().Reconcile(context.Background(), fc.spec(imageV1), Status{})
			if err != nil || st.Phase != PhaseSucceeded || res != 0 || st.Updated != 2 || st.Total != 2 {
				t.Fatalf("Reconcile = %+v, %+v, %v; want Succeeded with 2/2 pods", st, res, err)
			}
			if after := fc.snapshot(); after != before {
				t.Errorf("a rollout to the running images wrote to the cluster")
			}
		})
	}
}

// TestProgressBatches drives rollouts to the end and checks, after every Reconcile, that no
// more pods are down than max-unavailable allows and that no batch runs ahead of the one
// before it; at the end every pod runs the new images, was restarted once, and the workload is
// handed back with its strategy.
func TestProgressBatches(t *testing.T) {
	tests := []struct {
		name           string
		kind           workload.Kind
		pods           int
		batches        []intstr.IntOrString
		maxUnavailable intstr.IntOrString
		// order is the order pods start in.
		order []string
	}{
		{"StatefulSet, one at a time, highest ordinal first", workload.StatefulSet, 4, []intstr.IntOrString{one, half, all}, one,
			[]string{"web-3", "web-2", "web-1", "web-0"}},
		{"StatefulSet, two at a time", workload.StatefulSet, 5, []intstr.IntOrString{one, all}, intstr.FromInt32(2),
			[]string{"web-4", "web-3", "web-2", "web-1", "web-0"}},
		{"StatefulSet, 40% at a time, one batch", workload.StatefulSet, 5, nil, intstr.FromString("40%"),
			[]string{"web-4", "web-3", "web-2", "web-1", "web-0"}},
		{"pods by label, by name", workload.Pods, 3, []intstr.IntOrString{one, all}, one,
			[]string{"web-0", "web-1", "web-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: tt.kind, pods: tt.pods})
			spec := fc.spec(imageV2, tt.batches...)
			spec.MaxUnavailable = tt.maxUnavailable
			limit, err := resolveMaxUnavailable(tt.maxUnavailable, tt.pods)
			if err != nil {
				t.Fatal(err)
			}
			batches, err := ResolveBatches(tt.batches, tt.pods)
			if err != nil {
				t.Fatal(err)
			}
			var started int
			e := fc.engine()
			st, err := fc.drive(e, spec, Status{}, nil, func(st Status) {
				down, touched := 0, map[string]bool{}
				for _, p := range fc.pods() {
					s := fc.state(&p)
					if s == nil {
						continue
					}
					touched[p.Name] = true
					if inplace.Judged(&p, s, fc.now) != inplace.StageUpdated {
						down++
					}
				}
				if down > limit {
					t.Errorf("%d pods updating at once, max-unavailable %d", down, limit)
				}
				if st.Phase == PhaseProgressing && st.Batch > 0 && len(touched) > batches[st.Batch-1] {
					t.Errorf("batch %d/%d: %d pods touched, the batch ends at %d", st.Batch, st.Batches, len(touched), batches[st.Batch-1])
				}
				// The pods touched so far come first in the update order.
				for _, name := range tt.order[:len(touched)] {
					if !touched[name] {
						t.Errorf("pods %v started before %s, which comes first in the order %v", touched, name, tt.order)
					}
				}
				started = len(touched)
			})
			if err != nil {
				t.Fatal(err)
			}
			if st.Phase != PhaseSucceeded || st.Updated != tt.pods || st.Reason != "" {
				t.Fatalf("status = %+v, want Succeeded with %d pods", st, tt.pods)
			}
			if started != tt.pods {
				t.Errorf("%d pods started, want %d", started, tt.pods)
			}
			fc.assertOnImage(imageV2)
			for name, n := range fc.restarts() {
				if n != 1 {
					t.Errorf("pod %s restarted %d times, want once", name, n)
				}
			}
			if l := fc.lock(); l == nil || l.Phase != PhaseSucceeded {
				t.Errorf("lock = %+v, want phase Succeeded", l)
			}
			if tt.kind == workload.StatefulSet {
				sts := fc.sts()
				if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || sts.Spec.Template.Spec.Containers[0].Image != imageV2 {
					t.Errorf("StatefulSet handed back with strategy %s, template %s; want RollingUpdate, %s",
						sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.Containers[0].Image, imageV2)
				}
			}
			// Called again with the same spec, the rollout is reported as it ended.
			fc.play()
			again, _, err := e.Reconcile(context.Background(), spec, Status{})
			if err != nil || again.Phase != PhaseSucceeded || again.RolloutID != st.RolloutID || again.Updated != tt.pods {
				t.Errorf("Reconcile after success = %+v, %v; want Succeeded, rollout %s, %d pods", again, err, st.RolloutID, tt.pods)
			}
		})
	}
}

// TestStartFreezesBeforeAnyPodChanges: the first Reconcile freezes the StatefulSet (OnDelete, the new
// template, the lock) before any pod changes; the lock records what to put back.
func TestStartFreezesBeforeAnyPodChanges(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	st, res, err := fc.engine().Reconcile(context.Background(), fc.spec(imageV2), Status{})
	if err != nil || st.Phase != PhaseProgressing || st.RolloutID == "" {
		t.Fatalf("Reconcile = %+v, %+v, %v; want a started rollout", st, res, err)
	}
	sts := fc.sts()
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Spec.Template.Spec.Containers[0].Image != imageV2 {
		t.Errorf("StatefulSet: strategy %s, template %s; want OnDelete and %s", sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.Containers[0].Image, imageV2)
	}
	l := fc.lock()
	if l == nil || l.RolloutID != st.RolloutID || l.Phase != PhaseProgressing || l.PreviousImages[testApp] != imageV1 || l.Holder != testOwner {
		t.Errorf("lock = %+v, want rollout %s progressing from %s", l, st.RolloutID, imageV1)
	}
	for _, p := range fc.pods() {
		if s := fc.state(&p); s != nil || p.Spec.Containers[0].Image != imageV1 {
			t.Errorf("pod %s changed in the step that froze the workload: %s, %+v", p.Name, p.Spec.Containers[0].Image, s)
		}
	}
}

// TestSoak: a complete batch waits out its soak before the next batch starts.
func TestSoak(t *testing.T) {
	const soak = 30 * time.Second
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	spec := fc.spec(imageV2, one, all)
	spec.Soak = soak
	var soaking bool
	st, err := fc.drive(fc.engine(), spec, Status{}, nil, func(st Status) {
		soaking = soaking || strings.Contains(st.Message, "soaking")
	})
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("status %+v, %v; want Succeeded", st, err)
	}
	if !soaking {
		t.Error("no status said the batch was soaking")
	}
	first, second := fc.state(fc.pod("web-1")), fc.state(fc.pod("web-0"))
	if first == nil || second == nil {
		t.Fatal("pods have no state")
	}
	if gap := second.StartedAt.Sub(first.StageAt); gap < soak {
		t.Errorf("the second batch started %s after the first was updated, before its %s soak ended", gap, soak)
	}
}

// TestAnalysisVerdicts: a batch's analysis passes and the rollout goes on; an inconclusive one
// pauses (until the batch is accepted) or continues, as configured.
func TestAnalysisVerdicts(t *testing.T) {
	tests := []struct {
		name           string
		verdict        analysis.Verdict
		onInconclusive string
		wantPause      bool
	}{
		{"pass", analysis.Pass, "", false},
		{"inconclusive, pause", analysis.Inconclusive, InconclusivePause, true},
		{"inconclusive, default is pause", analysis.Inconclusive, "", true},
		{"inconclusive, continue", analysis.Inconclusive, InconclusiveContinue, false},
		{"pass over three measurements", analysis.Pass, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 2})
			fc.query.set(tt.verdict)
			e := fc.engine()
			spec := fc.spec(imageV2, one, all)
			spec.Analysis, spec.OnInconclusive = testAnalysis(t), tt.onInconclusive
			perBatch := 1
			if strings.Contains(tt.name, "three") {
				spec.Analysis, perBatch = testAnalysisOf(t, 3), 3
			}
			var analysing, passedShown bool
			st, err := fc.drive(e, spec, Status{}, nil, func(st Status) {
				analysing = analysing || st.Phase == PhaseAnalyzing
				// In the next batch, the status still names the last one's verdict, for the
				// drivers' views.
				passedShown = passedShown || (st.Phase == PhaseProgressing && st.Analysis != nil && st.Analysis.Verdict == tt.verdict && st.Batch > st.Analysis.Batch)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !analysing {
				t.Error("no status was Analyzing")
			}
			if !tt.wantPause && !passedShown {
				t.Errorf("no Progressing status named the last batch analysis' verdict %s", tt.verdict)
			}
			if tt.wantPause {
				if st.Phase != PhasePaused || st.Reason != ReasonAnalysisInconclusive || st.Analysis == nil || st.Analysis.Batch != 1 {
					t.Fatalf("status = %+v, want Paused on batch 1, AnalysisInconclusive", st)
				}
				if l := fc.lock(); l.Phase != PhasePaused {
					t.Errorf("lock phase %s, want Paused", l.Phase)
				}
				// Paused, it stays so and starts no pod, however often it is called.
				fc.now = fc.now.Add(time.Hour)
				again, _, err := e.Reconcile(context.Background(), spec, st)
				if err != nil || again.Phase != PhasePaused {
					t.Errorf("Reconcile while paused = %+v, %v; want Paused", again, err)
				}
				if s := fc.state(fc.pod("web-0")); s != nil {
					t.Errorf("pod web-0 started while the rollout was paused: %+v", s)
				}
				st, err = acceptPaused(fc, e, spec, again)
				if err != nil || st.Phase != PhaseProgressing {
					t.Fatalf("accepting the paused batch = %+v, %v; want Progressing", st, err)
				}
				fc.query.set(analysis.Pass)
				st = fc.mustDrive(e, spec, st, nil)
			}
			if st.Phase != PhaseSucceeded {
				t.Fatalf("status = %+v, want Succeeded", st)
			}
			if n := fc.query.measured(); n < 2*perBatch {
				t.Errorf("%d analysis queries for 2 batches, want %d per batch at least", n, perBatch)
			}
			fc.assertOnImage(imageV2)
		})
	}
}

// TestRollbackCauses: every reason a rollout rolls back, each reported with its code while the
// lock turns RollingBack; the rollback then puts every pod back on the images it ran.
func TestRollbackCauses(t *testing.T) {
	tests := []struct {
		name string
		opts clusterOpts
		// spec shapes the rollout; arrange, called after each Reconcile until the rollback,
		// plays what goes wrong.
		spec    func(*fakeCluster, *Spec)
		arrange func(*fakeCluster, Status)
		// request asks for the rollback once a pod is updated.
		request bool
		want    Reason
		// message is part of Status.Message.
		message string
	}{
		{
			name:    "pod failed",
			spec:    func(fc *fakeCluster, s *Spec) { s.Images[testApp] = imageCrash },
			want:    ReasonPodFailed,
			message: "CrashLoopBackOff",
		},
		{
			name:    "pod progress deadline",
			spec:    func(fc *fakeCluster, s *Spec) { s.Images[testApp] = imageHang; s.Timeout = 20 * time.Second },
			want:    ReasonDeadlineExceeded,
			message: "ProgressDeadlineExceeded: no progress within 20s",
		},
		{
			name: "batch progress deadline",
			spec: func(fc *fakeCluster, s *Spec) {
				s.Batches = []intstr.IntOrString{one, all}
				s.Timeout = 20 * time.Second
			},
			arrange: func(fc *fakeCluster, st Status) {
				// While the first batch updates, web-0, next in line, stops running (its node
				// went away), and never comes back.
				if fc.state(fc.pod("web-1")) != nil {
					p := fc.pod("web-0")
					if p.Status.Phase == corev1.PodRunning {
						p.Status.Phase = corev1.PodPending
						p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(fc.now)}
						fc.updatePod(p)
					}
				}
			},
			want:    ReasonDeadlineExceeded,
			message: "batch 2/2 made no progress within 20s",
		},
		{
			name: "pod failed during soak",
			spec: func(fc *fakeCluster, s *Spec) { s.Batches = []intstr.IntOrString{one, all}; s.Soak = time.Minute },
			arrange: func(fc *fakeCluster, st Status) {
				if strings.Contains(st.Message, "soaking") {
					if p := fc.pod("web-1"); p.Status.ContainerStatuses[0].Ready {
						fc.crash("web-1")
					}
				}
			},
			// Its update ended with no write, so a crash in the soak fails the pod's update:
			// its next step records the failure, and the rollout rolls back on it.
			want:    ReasonPodFailed,
			message: "pod web-1: CrashLoopBackOff",
		},
		{
			name: "analysis failed",
			spec: func(fc *fakeCluster, s *Spec) {
				s.Analysis = testAnalysis(fc.t)
				fc.query.set(analysis.Fail)
			},
			want:    ReasonAnalysisFailed,
			message: "analysis of batch 1: Fail",
		},
		{
			name: "analysis error",
			spec: func(fc *fakeCluster, s *Spec) {
				s.Analysis = testAnalysis(fc.t)
				fc.query.set(analysis.Error)
			},
			want:    ReasonAnalysisFailed,
			message: "analysis of batch 1: Error",
		},
		{
			name: "analysis inconclusive with fail",
			spec: func(fc *fakeCluster, s *Spec) {
				s.Analysis, s.OnInconclusive = testAnalysis(fc.t), InconclusiveFail
				fc.query.set(analysis.Inconclusive)
			},
			want:    ReasonAnalysisInconclusive,
			message: "analysis of batch 1: Inconclusive",
		},
		{
			name: "ineligible pod",
			opts: clusterOpts{kind: workload.Pods},
			arrange: func(fc *fakeCluster, st Status) {
				// A pod that joins the selection after the start and cannot restart a container.
				if st.RolloutID != "" && st.Updated == 1 {
					if _, err := fc.client.CoreV1().Pods(testNS).Get(context.Background(), "web-9", metav1.GetOptions{}); err != nil {
						p := runningPod("web-9", imageV1)
						p.Spec.RestartPolicy = corev1.RestartPolicyNever
						fc.createPod(p)
					}
				}
			},
			want:    ReasonPodFailed,
			message: "pod shop/web-9 cannot be updated in place: its restartPolicy is Never",
		},
		{
			name:    "rollback requested",
			request: true,
			want:    ReasonRollbackRequested,
			message: "rollback requested",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.pods = 2
			fc := newFakeCluster(t, opts)
			spec := fc.spec(imageV2)
			if tt.spec != nil {
				tt.spec(fc, &spec)
			}
			e := fc.engine()
			st, err := fc.drive(e, spec, Status{}, func(st Status) bool {
				if tt.arrange != nil {
					tt.arrange(fc, st)
				}
				return st.Phase == PhaseRollingBack || (tt.request && st.Updated == 1)
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.request {
				if st, err = rollBack(fc, e, spec, st); err != nil {
					t.Fatal(err)
				}
			}
			if st.Phase != PhaseRollingBack || st.Reason != tt.want || !strings.Contains(st.Message, tt.message) {
				t.Fatalf("status = phase %s, reason %s, message %q; want RollingBack, %s, saying %q", st.Phase, st.Reason, st.Message, tt.want, tt.message)
			}
			if l := fc.lock(); l == nil || l.Phase != PhaseRollingBack || l.Reason != tt.want {
				t.Fatalf("lock = %+v, want phase RollingBack, reason %s", l, tt.want)
			}
			fc.play()
			st = fc.mustDrive(e, spec, st, nil)
			if st.Phase != PhaseRolledBack || st.Reason != tt.want {
				t.Fatalf("status after the rollback = %+v, want RolledBack, %s", st, tt.want)
			}
			for _, p := range fc.pods() {
				if p.Name == "web-9" {
					continue // never updated
				}
				if got := imageIDOf(p.Spec.Containers[0].Image); got != imageIDOf(imageV1) || p.Status.ContainerStatuses[0].ImageID != got {
					t.Errorf("pod %s after the rollback: spec %s, running %s; want %s", p.Name, p.Spec.Containers[0].Image, p.Status.ContainerStatuses[0].ImageID, imageV1)
				}
			}
			if fc.kind == workload.StatefulSet {
				sts := fc.sts()
				if sts.Spec.Template.Spec.Containers[0].Image != imageV1 || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
					t.Errorf("StatefulSet after the rollback: template %s, strategy %s", sts.Spec.Template.Spec.Containers[0].Image, sts.Spec.UpdateStrategy.Type)
				}
				fc.play()
				fc.assertOnImage(imageV1)
			}
		})
	}
}

// TestRollbackOfAFinishedRollout: a rollout that succeeded is rolled back on request: the
// workload is frozen again, every pod goes back, and the template and strategy return.
func TestRollbackOfAFinishedRollout(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	spec := fc.spec(imageV2, one, all)
	st := fc.mustDrive(e, spec, Status{}, nil)
	if st.Phase != PhaseSucceeded {
		t.Fatalf("status = %+v, want Succeeded", st)
	}
	st, err := rollBack(fc, e, spec, st)
	if err != nil || st.Phase != PhaseRollingBack {
		t.Fatalf("rollback = %+v, %v; want RollingBack", st, err)
	}
	if s := fc.sts(); s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("StatefulSet strategy %s while rolling back, want OnDelete", s.Spec.UpdateStrategy.Type)
	}
	fc.play()
	st = fc.mustDrive(e, spec, st, nil)
	if st.Phase != PhaseRolledBack || st.RolledBack != 3 || st.Reason != ReasonRollbackRequested {
		t.Fatalf("status = %+v, want RolledBack, 3 pods", st)
	}
	fc.play()
	fc.assertOnImage(imageV1)
	if s := fc.sts(); s.Spec.Template.Spec.Containers[0].Image != imageV1 || s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("StatefulSet after the rollback: template %s, strategy %s", s.Spec.Template.Spec.Containers[0].Image, s.Spec.UpdateStrategy.Type)
	}
	// Asked again, the rollback is reported as done, and nothing is written.
	before := fc.snapshot()
	again, err := rollBack(fc, e, spec, st)
	if err != nil || again.Phase != PhaseRolledBack || again.RolledBack != 3 {
		t.Errorf("rollback again = %+v, %v; want RolledBack, 3 pods", again, err)
	}
	if fc.snapshot() != before {
		t.Error("a second rollback wrote to the cluster")
	}
}

// TestRollbackRefusals: a rollback of nothing, or of another holder's rollout, is bad input.
func TestRollbackRefusals(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 1})
	e := fc.engine()
	if _, err := rollBack(fc, e, fc.spec(imageV2), Status{}); err == nil || !strings.Contains(err.Error(), "no in-place rollout recorded") {
		t.Errorf("rollback with no rollout: %v", err)
	}
	if _, _, err := e.Reconcile(context.Background(), fc.spec(imageV2), Status{}); err != nil {
		t.Fatal(err)
	}
	other := fc.spec(imageV2)
	other.Holder = "tekton:shop/run-1"
	var inv *InvalidError
	if _, err := rollBack(fc, e, other, Status{}); !errors.As(err, &inv) || !strings.Contains(err.Error(), "only its holder can roll it back") {
		t.Errorf("rollback by another holder: %v", err)
	}
}

// TestSupersede: a rollout to new images replaces the one in flight when asked to; the first
// one's driver is told, the pods end on the newest images, and a rollback takes them back to
// what ran before the first.
func TestSupersede(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	first := fc.spec(imageV2, one, all)
	st1 := fc.mustDrive(e, first, Status{}, func(st Status) bool { return st.Updated == 1 })

	second := fc.spec(imageV3, one, all)
	second.Supersede = true
	st2, _, err := e.Reconcile(context.Background(), second, Status{})
	if err != nil || st2.Reason != ReasonSuperseded || st2.RolloutID == st1.RolloutID || st2.Phase != PhaseProgressing {
		t.Fatalf("superseding = %+v, %v; want Progressing, Superseded, a new rollout", st2, err)
	}
	if l := fc.lock(); len(l.Superseded) != 1 || l.Superseded[0] != st1.RolloutID || l.Images[testApp] != imageV3 || l.PreviousImages[testApp] != imageV1 {
		t.Errorf("lock = %+v, want rollout of %s superseding %s, previous %s", l, imageV3, st1.RolloutID, imageV1)
	}
	var sup *SupersededError
	if _, _, err := e.Reconcile(context.Background(), first, st1); !errors.As(err, &sup) || sup.By != st2.RolloutID {
		t.Errorf("the first rollout's driver, called again: %v, want SupersededError by %s", err, st2.RolloutID)
	}
	fc.play()
	st2 = fc.mustDrive(e, second, st2, nil)
	if st2.Phase != PhaseSucceeded {
		t.Fatalf("status = %+v, want Succeeded", st2)
	}
	fc.assertOnImage(imageV3)
	for _, p := range fc.pods() {
		if s := fc.state(&p); s == nil || s.Containers[0].BeforeImage != imageV1 {
			t.Errorf("pod %s state %+v, want before image %s", p.Name, s, imageV1)
		}
	}
	st := driveRollback(fc, e, second, st2)
	if st.Phase != PhaseRolledBack {
		t.Fatalf("rollback = %+v, want RolledBack", st)
	}
	fc.play()
	fc.assertOnImage(imageV1)
}

// TestSupersedeRefusesAnInitContainerLeftUndone: mid-rollout, the template the images come
// from gives an init container left alone (Keep) a new image: the superseding rollout is refused
// naming it, and the rollout in flight is left as it was.
func TestSupersedeRefusesAnInitContainerLeftUndone(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	withInitContainer(fc)
	e := fc.engine()
	first := fc.spec(imageV2, one, all)
	first.Keep = map[string]string{"setup": "reg.example/setup:v1"}
	st1 := fc.mustDrive(e, first, Status{}, func(st Status) bool { return st.Updated == 1 })
	lock := fc.lock()

	second := first
	second.Keep = map[string]string{"setup": "reg.example/setup:v2"}
	second.Supersede = true
	_, _, err := e.Reconcile(context.Background(), second, Status{})
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), `StatefulSet shop/web: init container "setup" runs reg.example/setup:v1, and the pod template the images come from gives it reg.example/setup:v2`) {
		t.Fatalf("superseding = %v, want an InvalidError naming init container setup", err)
	}
	if l := fc.lock(); l.RolloutID != st1.RolloutID || l.SpecHash != lock.SpecHash || l.Phase != lock.Phase {
		t.Errorf("lock = %+v, want rollout %s left in flight", l, st1.RolloutID)
	}
}

// TestSupersedeRefusedWhileRollingBack: a rollout rolling back is not replaced.
func TestSupersedeRefusedWhileRollingBack(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	e := fc.engine()
	first := fc.spec(imageV2)
	st := fc.mustDrive(e, first, Status{}, func(st Status) bool { return st.Updated == 1 })
	if _, err := rollBack(fc, e, first, st); err != nil {
		t.Fatal(err)
	}
	second := fc.spec(imageV3)
	second.Supersede = true
	before := fc.snapshot()
	var inv *InvalidError
	if _, _, err := e.Reconcile(context.Background(), second, Status{}); !errors.As(err, &inv) || !strings.Contains(err.Error(), "is RollingBack; wait for it to finish") {
		t.Errorf("superseding a rollback: %v", err)
	}
	if fc.snapshot() != before {
		t.Error("the refused supersede wrote to the cluster")
	}
}

// TestHaltOnForeignTemplateChange: someone else changing the template mid-rollout stops the
// rollout with nothing rolled back; putting the rollout's images back lets it finish, and a
// rollback from the halt keeps their template unless asked to restore it.
func TestHaltOnForeignTemplateChange(t *testing.T) {
	tests := []struct {
		name string
		// then: "resume" puts the rollout's images back; "rollback" and "rollback restoring"
		// roll back from the halt.
		then         string
		wantTemplate string
	}{
		{"put back and finish", "resume", imageV2},
		{"roll back, keep their template", "rollback", "reg.example/app:v9"},
		{"roll back, restore the template", "rollback restoring", imageV1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2)
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
			fc.setTemplateImage("reg.example/app:v9")

			st, _, err := e.Reconcile(context.Background(), spec, st)
			if err != nil || st.Phase != PhaseFailed || st.Reason != ReasonTemplateChanged || !strings.Contains(st.Message, "someone else changed the template") {
				t.Fatalf("status = %+v, %v; want Failed, TemplateChanged", st, err)
			}
			if l := fc.lock(); l.Phase != PhaseHalted || l.Reason != ReasonTemplateChanged {
				t.Errorf("lock = %+v, want Halted, TemplateChanged", l)
			}
			// Halted, it stays so and touches no pod.
			before := fc.snapshot()
			if again, _, err := e.Reconcile(context.Background(), spec, st); err != nil || again.Phase != PhaseFailed || again.Updated != 1 {
				t.Errorf("Reconcile while halted = %+v, %v; want Failed with 1 pod updated", again, err)
			}
			if fc.snapshot() != before {
				t.Error("a halted rollout wrote to the cluster")
			}

			switch tt.then {
			case "resume":
				fc.setTemplateImage(imageV2)
				fc.play()
				st = fc.mustDrive(e, spec, st, nil)
				if st.Phase != PhaseSucceeded {
					t.Fatalf("status = %+v, want Succeeded", st)
				}
				fc.assertOnImage(imageV2)
			default:
				rb := rollbackOf(spec)
				rb.RestoreTemplate = tt.then == "rollback restoring"
				st = driveAbort(fc, e, rb, st)
				if st.Phase != PhaseRolledBack || st.Reason != ReasonRollbackRequested {
					t.Fatalf("status = %+v, want RolledBack", st)
				}
				for _, p := range fc.pods() {
					if imageIDOf(p.Spec.Containers[0].Image) != imageIDOf(imageV1) {
						t.Errorf("pod %s on %s after the rollback, want %s", p.Name, p.Spec.Containers[0].Image, imageV1)
					}
				}
			}
			if got := fc.sts().Spec.Template.Spec.Containers[0].Image; got != tt.wantTemplate {
				t.Errorf("template image %s, want %s", got, tt.wantTemplate)
			}
		})
	}
}

// setTemplateImage changes the StatefulSet's template image, as someone else would.
func (fc *fakeCluster) setTemplateImage(image string) {
	fc.t.Helper()
	sts := fc.sts()
	sts.Spec.Template.Spec.Containers[0].Image = image
	if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
		fc.t.Fatal(err)
	}
}

// TestAPIErrors: an API error on a write is classified for the caller (a conflict or a server
// error is retried, a forbidden write is permanent, and says so while rolling back), nothing is
// half-written, and the rollout goes on once the API answers again.
func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name string
		code int
		// rollingBack fails the writes of a rollback instead of the start.
		rollingBack bool
		// want: retry, permanent or rollingBack (permanent, the rollback left incomplete).
		want string
	}{
		{"conflict", 409, false, "retry"},
		{"forbidden", 403, false, "permanent"},
		{"internal error", 500, false, "retry"},
		{"forbidden while rolling back", 403, true, "rollingBack"},
		{"conflict while rolling back", 409, true, "retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 2})
			e := fc.engine()
			spec := fc.spec(imageV2)
			var st Status
			if tt.rollingBack {
				st = fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
				var err error
				if st, err = rollBack(fc, e, spec, st); err != nil {
					t.Fatal(err)
				}
			}
			fc.failWrites(tt.code)
			before := fc.snapshot()
			got, _, err := e.Reconcile(context.Background(), spec, st)
			if err == nil {
				t.Fatalf("Reconcile with every write failing %d: no error (status %+v)", tt.code, got)
			}
			var pe *PermanentError
			kind := "retry"
			switch {
			case errors.As(err, &pe) && pe.RollingBack:
				kind = "rollingBack"
			case errors.As(err, &pe):
				kind = "permanent"
			}
			var inv *InvalidError
			if kind != tt.want || errors.As(err, &inv) {
				t.Errorf("error %v is %s (%T), want %s", err, kind, err, tt.want)
			}
			if !strings.Contains(err.Error(), "injected") {
				t.Errorf("error %q does not carry the API's answer", err)
			}
			if fc.snapshot() != before {
				t.Error("a failed write changed the cluster")
			}
			fc.failWrites(0)
			fc.play()
			end := fc.mustDrive(e, spec, st, nil)
			want := PhaseSucceeded
			if tt.rollingBack {
				want = PhaseRolledBack
			}
			if end.Phase != want {
				t.Errorf("once the API answers: %+v, want %s", end, want)
			}
		})
	}
}

// TestPodFailingBeforeIsNotBlamed: a pod that crash-looped before the rollout is updated like the
// others (when unready pods are allowed), reported as unhealthy, and does not fail the rollout.
func TestPodFailingBeforeIsNotBlamed(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	fc.crashLoop("web-1")
	spec := fc.spec(imageV2, one, all)
	var inv *InvalidError
	if _, _, err := fc.engine().Reconcile(context.Background(), spec, Status{}); !errors.As(err, &inv) || !strings.Contains(err.Error(), "web-1") {
		t.Fatalf("start with a crash-looping pod: %v, want a refusal naming web-1", err)
	}
	spec.AllowUnready = true
	st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
	if st.Phase != PhaseSucceeded || st.Updated != 3 || st.Unhealthy != 1 || !strings.Contains(st.Message, "1 failing as before the update") {
		t.Fatalf("status = %+v, want Succeeded, 3 updated, 1 unhealthy", st)
	}
	p := fc.pod("web-1")
	if s := fc.state(p); s == nil || inplace.Judged(p, s, fc.now) != inplace.StageUpdated || s.Containers[0].FailingBefore != "CrashLoopBackOff" || p.Spec.Containers[0].Image != imageV2 {
		t.Errorf("web-1: image %s, state %+v; want Updated to %s, failing before", p.Spec.Containers[0].Image, s, imageV2)
	}
}

// TestPodsCreatedFromTheNewTemplate: a pod the StatefulSet controller creates from the new
// template during the rollout (a scale-up) counts once it is Ready, with no update of its own;
// one that never becomes Ready fails the batch's progress deadline, named.
func TestPodsCreatedFromTheNewTemplate(t *testing.T) {
	tests := []struct {
		name  string
		ready bool
	}{
		{"Ready: counted", true},
		{"never Ready: deadline", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 2})
			e := fc.engine()
			spec := fc.spec(imageV2, one, all)
			spec.Timeout = 20 * time.Second
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.RolloutID != "" })
			fc.play()
			sts := fc.sts()
			sts.Spec.Replicas = ptr(int32(3))
			if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			p := runningPod("web-2", imageV2)
			p.CreationTimestamp = metav1.NewTime(fc.now)
			p.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Status.UpdateRevision
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: testName, UID: "uid-sts-web", Controller: ptr(true)}}
			p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(fc.now)
			if !tt.ready {
				p.Status.Conditions[0].Status = corev1.ConditionFalse
				p.Status.ContainerStatuses[0].Ready = false
				p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
			}
			fc.createPod(p)
			st = fc.mustDrive(e, spec, st, nil)
			if tt.ready {
				if st.Phase != PhaseSucceeded || st.Updated != 3 || st.Total != 3 {
					t.Fatalf("status = %+v, want Succeeded, 3/3 pods", st)
				}
				fc.assertOnImage(imageV2)
				if s := fc.state(fc.pod("web-2")); s != nil || fc.restarts()["web-2"] != 0 {
					t.Errorf("web-2, created on the new images, was updated: %+v", s)
				}
				return
			}
			if st.Phase != PhaseRolledBack || st.Reason != ReasonDeadlineExceeded || !strings.Contains(st.Message, "pod shop/web-2, created from the new template, is not Ready: container \"app\": ContainerCreating") {
				t.Fatalf("status = %+v, want RolledBack, DeadlineExceeded, naming web-2", st)
			}
		})
	}
}

// TestRollbackWithUnreadableState: a pod whose state annotation was edited into something
// unreadable is skipped by a rollback when the rollout never touched it, and stops the rollback
// for a person when it was updated.
func TestRollbackWithUnreadableState(t *testing.T) {
	tests := []struct {
		name string
		pod  string
		// want is the phase the rollback ends in, and message what its status says.
		want    Phase
		message string
	}{
		{"untouched pod: skipped", "web-0", PhaseRolledBack, "skipped web-0: state annotation inplace-rollout.io/state unreadable, and not touched by the rollout"},
		{"updated pod: a person must look", "web-2", PhaseFailed, "rollback incomplete, a person must look"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			spec := fc.spec(imageV2)
			st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.Updated == 1 })
			fc.play()
			p := fc.pod(tt.pod)
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[inplace.StateAnnotation] = "{edited"
			fc.updatePod(p)
			st = driveRollback(fc, e, spec, st)
			if st.Phase != tt.want || !strings.Contains(st.Message, tt.message) {
				t.Fatalf("status = phase %s, message %q; want %s, saying %q", st.Phase, st.Message, tt.want, tt.message)
			}
			if got := fc.pod("web-1").Spec.Containers[0].Image; imageIDOf(got) != imageIDOf(imageV1) {
				t.Errorf("web-1 on %s after the rollback, want %s", got, imageV1)
			}
		})
	}
}

// TestEndedRolloutReportedToItsCaller: a caller whose last status names a rollout that has since
// ended (the step that ended it never reached the caller) is told how it ended, with nothing
// written; a caller with no status starts the images anew.
func TestEndedRolloutReportedToItsCaller(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3})
	e := fc.engine()
	spec := fc.spec(imageCrash, one, all)
	st := fc.mustDrive(e, spec, Status{}, nil)
	if st.Phase != PhaseRolledBack || st.Reason != ReasonPodFailed {
		t.Fatalf("status = %+v, want RolledBack, PodFailed", st)
	}
	// The caller's last status is the one before the rollback ended.
	prev := Status{RolloutID: st.RolloutID, Phase: PhaseRollingBack}
	before := fc.snapshot()
	got, res, err := e.Reconcile(context.Background(), spec, prev)
	if err != nil || got.Phase != PhaseRolledBack || got.RolloutID != st.RolloutID || got.Reason != ReasonPodFailed ||
		got.RolledBack != st.RolledBack || res != 0 || !strings.Contains(got.Message, "rolled back") {
		t.Errorf("Reconcile from %+v = %+v, %+v, %v; want rollout %s RolledBack (PodFailed, %d pods back), no requeue", prev, got, res, err, st.RolloutID, st.RolledBack)
	}
	if fc.snapshot() != before {
		t.Error("reporting an ended rollout wrote to the cluster")
	}
	fc.play()
	again, _, err := e.Reconcile(context.Background(), spec, Status{})
	if err != nil || again.Phase != PhaseProgressing || again.RolloutID == st.RolloutID {
		t.Errorf("Reconcile with no status = %+v, %v; want a new rollout started", again, err)
	}
}

// withInitContainer gives the StatefulSet's template, when there is one, and every pod the plain
// init container setup on reg.example/setup:v1.
func withInitContainer(fc *fakeCluster) {
	fc.t.Helper()
	setup := []corev1.Container{{Name: "setup", Image: "reg.example/setup:v1"}}
	if fc.kind == workload.StatefulSet {
		sts := fc.sts()
		sts.Spec.Template.Spec.InitContainers = setup
		if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
			fc.t.Fatal(err)
		}
	}
	for _, p := range fc.pods() {
		p.Spec.InitContainers = setup
		fc.updatePod(&p)
	}
}

// An init container left alone (Keep) that already runs the image asked for is no reason to
// refuse: the rollout starts, and its hash is not that of the same spec without Keep.
func TestStartKeepOnItsImage(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2})
	withInitContainer(fc)
	spec := fc.spec(imageV2)
	without := spec.Hash()
	spec.Keep = map[string]string{"setup": "reg.example/setup:v1"}
	if spec.Hash() == without {
		t.Error("Keep does not change the spec's hash: a new image of an init container left alone would resume the last rollout")
	}
	st, res, err := fc.engine().Reconcile(context.Background(), spec, Status{})
	if err != nil || st.Phase != PhaseProgressing || st.RolloutID == "" {
		t.Fatalf("Reconcile = %+v, %+v, %v; want a rollout started", st, res, err)
	}
}
