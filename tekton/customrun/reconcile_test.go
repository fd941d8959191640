package customrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonfake "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// statefulSet is StatefulSet ns/web of 3 replicas with one container, and the lock annotation
// when not empty.
func statefulSet(lock string) *appsv1.StatefulSet {
	// Generation 1, as the API server starts every apps/v1 object, observed by the controller.
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "web-uid", Generation: 1}}
	s.Status.ObservedGeneration = 1
	s.Spec.Replicas = ptr.To[int32](3)
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	s.Spec.Template.Labels = map[string]string{"app": "web"}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}
	if lock != "" {
		s.Annotations = map[string]string{workload.LockAnnotation: lock}
	}
	return s
}

// held is run as the controller left it after its first step: with the finalizer.
func held(run *v1beta1.CustomRun) *v1beta1.CustomRun {
	run.Finalizers = append(run.Finalizers, Finalizer)
	return run
}

// updatedPods are web's 3 pods, each recorded Updated by rollout id.
func updatedPods(id string) []runtime.Object {
	var pods []runtime.Object
	for i := range 3 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web"},
			Annotations:     map[string]string{inplace.StateAnnotation: `{"rolloutID":"` + id + `","stage":"Updated","containers":[]}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "web-uid", Controller: ptr.To(true)}}}}
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:v2"}}
		pods = append(pods, p)
	}
	return pods
}

// started is run as the controller left it after its second step: held and started at at.
func started(run *v1beta1.CustomRun, at time.Time) *v1beta1.CustomRun {
	held(run)
	run.Status.StartTime = &metav1.Time{Time: at}
	run.Status.InitializeConditions()
	return run
}

func withProgress(run *v1beta1.CustomRun, p Progress) *v1beta1.CustomRun {
	setProgress(&run.Status, p)
	return run
}

// reconcileOnce runs one Reconcile of run against fake clients holding run and objs, and returns
// the run as stored afterwards and the kube client's actions.
func reconcileOnce(t *testing.T, run *v1beta1.CustomRun, objs ...runtime.Object) (*v1beta1.CustomRun, []k8stesting.Action, error) {
	t.Helper()
	tekton := tektonfake.NewSimpleClientset(run)
	kube := kubefake.NewClientset(objs...)
	r := &Reconciler{Engine: &rollout.Engine{Client: kube, Now: func() time.Time { return now }}, Runs: tekton.TektonV1beta1(),
		Specs: specs{docs: map[string]string{"web": refDoc}}, Now: func() time.Time { return now }}
	_, err := r.Reconcile(context.Background(), run)
	got, getErr := tekton.TektonV1beta1().CustomRuns(run.Namespace).Get(context.Background(), run.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	return got, kube.Actions(), err
}

func condition(run *v1beta1.CustomRun) apis.Condition {
	if c := run.Status.GetCondition(apis.ConditionSucceeded); c != nil {
		return *c
	}
	return apis.Condition{}
}

func TestReconcileDecides(t *testing.T) {
	images := arr("images", "app=registry.example/app:v2")
	cancelled := func(run *v1beta1.CustomRun) *v1beta1.CustomRun {
		run.Spec.Status = v1beta1.CustomRunSpecStatusCancelled
		return run
	}
	// byPipelineRun is run as PipelineRun ns/pr cancels it, with the message Tekton writes.
	byPipelineRun := func(run *v1beta1.CustomRun, msg v1beta1.CustomRunSpecStatusMessage) *v1beta1.CustomRun {
		run.Labels = map[string]string{pipeline.PipelineRunLabelKey: "pr"}
		run.Spec.StatusMessage = msg
		return cancelled(run)
	}
	tests := []struct {
		name       string
		run        *v1beta1.CustomRun
		objs       []runtime.Object
		wantStatus corev1.ConditionStatus
		wantReason string
		wantMsg    []string
		// notMsg are words the message must not say: a cancel must not read as a timeout.
		notMsg []string
		// writes says whether the step may write to the cluster besides the run's status.
		writes bool
	}{
		{name: "a held run only starts", run: held(referenced("web")), wantStatus: corev1.ConditionUnknown, wantReason: "Started"},
		{name: "workspaces are refused", run: func() *v1beta1.CustomRun {
			r := started(referenced("web"), now)
			r.Spec.Workspaces = []v1beta1.WorkspaceBinding{{Name: "src"}}
			return r
		}(), wantStatus: corev1.ConditionFalse, wantReason: "CustomRunWorkspaceNotSupported", wantMsg: []string{"workspaces"}},
		{name: "a bad spec fails naming the field", run: started(embedded(`{"target": {"kind": "StatefulSet", "name": "web"}, "sok": "1s"}`, images), now),
			wantStatus: corev1.ConditionFalse, wantReason: ReasonInvalidSpec, wantMsg: []string{"sok", "nothing was changed"}},
		{name: "a bad spec cancelled is cancelled", run: cancelled(started(embedded(`{"sok": "1s"}`), now)),
			wantStatus: corev1.ConditionFalse, wantReason: "CustomRunCancelled", wantMsg: []string{"sok"}},
		{name: "cancelled before the rollout started", run: cancelled(started(referenced("web"), now)), objs: []runtime.Object{statefulSet("")},
			wantStatus: corev1.ConditionFalse, wantReason: "CustomRunCancelled", wantMsg: []string{"nothing to roll back"}, notMsg: []string{"timed out"}},
		// Tekton counts a run as timed out by its PipelineRun only with reason CustomRunCancelled.
		{name: "cancelled by its PipelineRun's timeout", run: byPipelineRun(started(referenced("web"), now), v1beta1.CustomRunCancelledByPipelineTimeoutMsg), objs: []runtime.Object{statefulSet("")},
			wantStatus: corev1.ConditionFalse, wantReason: "CustomRunCancelled",
			wantMsg: []string{"because its PipelineRun ns/pr timed out", "nothing to roll back", "raise the PipelineRun's timeouts"}, notMsg: []string{"was cancelled"}},
		{name: "cancelled by its PipelineRun's cancel", run: byPipelineRun(started(referenced("web"), now), v1beta1.CustomRunCancelledByPipelineMsg), objs: []runtime.Object{statefulSet("")},
			wantStatus: corev1.ConditionFalse, wantReason: "CustomRunCancelled",
			wantMsg: []string{"because its PipelineRun ns/pr was cancelled", "nothing to roll back"}, notMsg: []string{"timed out", "timeouts"}},
		{name: "timed out before the rollout started", run: func() *v1beta1.CustomRun {
			r := started(referenced("web"), now.Add(-2*time.Minute))
			r.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
			return r
		}(), objs: []runtime.Object{statefulSet("")},
			wantStatus: corev1.ConditionFalse, wantReason: "CustomRunTimedOut", wantMsg: []string{"timed out after 1m0s", "nothing to roll back", "raise the pipeline task's timeout"}, notMsg: []string{"PipelineRun"}},
		{name: "no timeout when it is 0", run: func() *v1beta1.CustomRun {
			r := started(referenced("web"), now.Add(-2*time.Hour))
			r.Spec.Timeout = &metav1.Duration{}
			return r
		}(), wantStatus: corev1.ConditionFalse, wantReason: ReasonRefused, wantMsg: []string{"StatefulSet ns/web"}},
		{name: "a missing workload is refused", run: started(referenced("web"), now),
			wantStatus: corev1.ConditionFalse, wantReason: ReasonRefused, wantMsg: []string{"StatefulSet ns/web", "nothing was changed"}},
		{name: "a rollout that succeeded in a step whose status was lost", run: withProgress(started(referenced("web"), now), Progress{RolloutID: "r1", Phase: rollout.PhaseProgressing, Total: 3, Updated: 2}),
			objs:       append(updatedPods("r1"), statefulSet(`{"holder":"tekton:ns/pr-rollout","rolloutID":"r1","phase":"Succeeded","images":{"app":"registry.example/app:v2"}}`)),
			wantStatus: corev1.ConditionTrue, wantReason: "Succeeded", wantMsg: []string{"3 of 3 pods updated", "rollout r1 succeeded"}},
		{name: "a rollout that rolled back in a step whose status was lost", run: withProgress(started(referenced("web"), now), Progress{RolloutID: "r1", Phase: rollout.PhaseRollingBack, Total: 3}),
			objs:       []runtime.Object{statefulSet(`{"holder":"tekton:ns/pr-rollout","rolloutID":"r1","phase":"RolledBack","reasonCode":"PodFailed","reason":"pod web-0 crashed"}`)},
			wantStatus: corev1.ConditionFalse, wantReason: "PodFailed", wantMsg: []string{"pod web-0 crashed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, actions, err := reconcileOnce(t, tt.run, tt.objs...)
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			c := condition(got)
			if c.Status != tt.wantStatus || c.Reason != tt.wantReason {
				t.Errorf("Succeeded %s %s: %s; want %s %s", c.Status, c.Reason, c.Message, tt.wantStatus, tt.wantReason)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q does not say %q", c.Message, w)
				}
			}
			for _, w := range tt.notMsg {
				if strings.Contains(c.Message, w) {
					t.Errorf("message %q says %q", c.Message, w)
				}
			}
			if was := tt.run.Status.StartTime; was != nil && (got.Status.StartTime == nil || !got.Status.StartTime.Time.Equal(was.Time)) {
				t.Errorf("startTime %v, want %v kept", got.Status.StartTime, tt.run.Status.StartTime)
			}
			for _, a := range actions {
				if a.GetVerb() != "get" && a.GetVerb() != "list" && !tt.writes {
					t.Errorf("the step wrote to the cluster: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

func TestNewRunStartsOnTheControllersClock(t *testing.T) {
	got, _, err := reconcileOnce(t, held(referenced("web")))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.StartTime == nil || !got.Status.StartTime.Time.Equal(now) {
		t.Errorf("startTime %v, want %v", got.Status.StartTime, now)
	}
}

func TestSettleRetriesARolledBackAttempt(t *testing.T) {
	rolledBack := rollout.Status{RolloutID: "r1", Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonPodFailed, Total: 3, Updated: 0, RolledBack: 1, Message: "pod web-0 crashed"}
	r := &Reconciler{Now: func() time.Time { return now }}
	spec := rollout.Spec{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}, Holder: "tekton:ns/pr-rollout"}

	run := started(referenced("web"), now.Add(-time.Minute))
	run.Spec.Retries = 1
	r.settle(run, spec, rolledBack, 0)
	s := run.Status
	if c := condition(run); c.Status != corev1.ConditionUnknown || c.Reason != ReasonRetrying {
		t.Errorf("after the first attempt: Succeeded %s %s, want Unknown %s", c.Status, c.Reason, ReasonRetrying)
	}
	if len(s.RetriesStatus) != 1 {
		t.Fatalf("retriesStatus %d, want 1", len(s.RetriesStatus))
	}
	first := s.RetriesStatus[0]
	if c := first.GetCondition(apis.ConditionSucceeded); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("retriesStatus[0] Succeeded %+v, want False PodFailed", c)
	}
	if p := progressFrom(&first); p.RolloutID != "r1" {
		t.Errorf("retriesStatus[0] progress %+v, want rollout r1", p)
	}
	if !s.StartTime.Time.Equal(now) || s.CompletionTime != nil || len(s.Results) != 0 || progressFrom(&s).RolloutID != "" {
		t.Errorf("the next attempt: startTime %v, completionTime %v, results %v, progress %s: want a fresh attempt from now", s.StartTime, s.CompletionTime, s.Results, s.ExtraFields.Raw)
	}

	// The second attempt rolls back too: no retries left, the run fails with the results.
	r.settle(run, spec, rolledBack, 0)
	if c := condition(run); c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("after the last attempt: Succeeded %s %s, want False PodFailed", c.Status, c.Reason)
	}
	want := map[string]string{ResultPhase: "RolledBack", ResultUpdatedPods: "0", ResultRolledBack: "1"}
	for _, res := range run.Status.Results {
		if w, ok := want[res.Name]; ok && res.Value != w {
			t.Errorf("result %s = %q, want %q", res.Name, res.Value, w)
		}
	}
	if len(run.Status.RetriesStatus) != 1 {
		t.Errorf("retriesStatus %d, want 1", len(run.Status.RetriesStatus))
	}
}

func TestProgressStaysSmall(t *testing.T) {
	st := rollout.Status{RolloutID: "web-0123456789abcdef-20261202100000", Phase: rollout.PhaseProgressing, Batch: 3, Batches: 4,
		Total: 100000, Updated: 99999, RolledBack: 0, Message: strings.Repeat("x", 10000)}
	raw, err := json.Marshal(progressOf(st, "StatefulSet ns/web"))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 512 {
		t.Errorf("extraFields of a 100000-pod rollout: %d bytes (%s), want a few counts", len(raw), raw)
	}
}

func TestStatusConflictIsRetried(t *testing.T) {
	run := referenced("web")
	tekton := tektonfake.NewSimpleClientset(run)
	tekton.PrependReactor("update", "customruns", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "tekton.dev", Resource: "customruns"}, run.Name, nil)
	})
	r := &Reconciler{Engine: &rollout.Engine{Client: kubefake.NewClientset()}, Runs: tekton.TektonV1beta1(), Specs: specs{}, Now: func() time.Time { return now }}
	_, err := r.Reconcile(context.Background(), run)
	if !apierrors.IsConflict(err) {
		t.Errorf("Reconcile: %v, want the conflict returned, so that the run is read again and decided anew", err)
	}
}

func TestTimeoutIsLookedAtWhenItComes(t *testing.T) {
	run := held(referenced("web"))
	run.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
	tekton := tektonfake.NewSimpleClientset(run)
	r := &Reconciler{Engine: &rollout.Engine{Client: kubefake.NewClientset()}, Runs: tekton.TektonV1beta1(), Specs: specs{}, Now: func() time.Time { return now }}
	// The first step only starts the run and waits for the next change; its timeout comes in a
	// minute, changed or not.
	requeue, err := r.Reconcile(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if requeue != time.Minute {
		t.Errorf("requeue after %s, want 1m0s: when the timeout comes", requeue)
	}
	for _, tt := range []struct {
		started time.Duration
		want    time.Duration
		ok      bool
	}{{-50 * time.Second, 10 * time.Second, true}, {-2 * time.Minute, -time.Minute, true}} {
		r := started(referenced("web"), now.Add(tt.started))
		r.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		if left, ok := timeLeft(r, now); left != tt.want || ok != tt.ok {
			t.Errorf("started %s ago: timeLeft %s %v, want %s %v", -tt.started, left, ok, tt.want, tt.ok)
		}
	}
	noTimeout := started(referenced("web"), now.Add(-time.Hour))
	noTimeout.Spec.Timeout = &metav1.Duration{}
	if _, ok := timeLeft(noTimeout, now); ok {
		t.Error("timeLeft of a run with timeout 0: want none")
	}
}

func TestFinalizer(t *testing.T) {
	done := func(run *v1beta1.CustomRun) *v1beta1.CustomRun {
		run.Status.MarkCustomRunSucceeded("Succeeded", "done")
		return run
	}
	deleted := func(run *v1beta1.CustomRun) *v1beta1.CustomRun {
		run.DeletionTimestamp = &metav1.Time{Time: now}
		return run
	}
	tests := []struct {
		name    string
		run     *v1beta1.CustomRun
		objs    []runtime.Object
		want    bool
		wantMsg string
	}{
		{name: "a new run is held first, before it starts", run: referenced("web"), want: true},
		{name: "a done run is let go", run: done(started(referenced("web"), now)), want: false},
		{name: "a run deleted before its rollout started fails with nothing to roll back", run: deleted(started(referenced("web"), now)),
			objs: []runtime.Object{statefulSet("")}, want: true, wantMsg: "deleted; nothing to roll back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := reconcileOnce(t, tt.run, tt.objs...)
			if err != nil {
				t.Fatal(err)
			}
			if has := slices.Contains(got.Finalizers, Finalizer); has != tt.want {
				t.Errorf("finalizers %v: holds %v, want %v", got.Finalizers, has, tt.want)
			}
			if c := condition(got); !strings.Contains(c.Message, tt.wantMsg) {
				t.Errorf("Succeeded %s %s: %s; want it to say %q", c.Status, c.Reason, c.Message, tt.wantMsg)
			}
			if tt.wantMsg == "" && !equality.Semantic.DeepEqual(got.Status, tt.run.Status) {
				t.Errorf("the status changed in the step that set the finalizer: one write per step")
			}
		})
	}
}

// A step that fails with API trouble returns an error that names the run's rollout, for the
// controller's retry line, and still says what failed.
func TestStepErrorNamesTheRollout(t *testing.T) {
	run := withProgress(started(referenced("web"), now), Progress{RolloutID: "r-1"})
	tekton := tektonfake.NewSimpleClientset(run)
	kube := kubefake.NewClientset()
	kube.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd is down"))
	})
	r := &Reconciler{Engine: &rollout.Engine{Client: kube, Now: func() time.Time { return now }}, Runs: tekton.TektonV1beta1(),
		Specs: specs{docs: map[string]string{"web": refDoc}}, Now: func() time.Time { return now }}
	_, err := r.Reconcile(context.Background(), run)
	var re *rollout.StepError
	if !errors.As(err, &re) {
		t.Fatalf("Reconcile: %v (%T), want a *rollout.StepError", err, err)
	}
	want := []any{"namespace", "ns", "workload", "StatefulSet/web", "rolloutID", "r-1"}
	if got := re.LogAttrs(); !slices.Equal(got, want) {
		t.Errorf("LogAttrs() = %v, want %v", got, want)
	}
	if !strings.Contains(err.Error(), "etcd is down") || !apierrors.IsInternalError(err) {
		t.Errorf("Reconcile: %v, want the API error, still an InternalError", err)
	}
}
