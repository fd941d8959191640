package customrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/client/clientset/versioned/typed/pipeline/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Finalizer holds a CustomRun of ours while its rollout may need a rollback: deleted in flight,
// the run rolls back first. It is removed once the run is done.
const Finalizer = "inplace-rollout.io/rollback"

// AcceptAnnotation on a CustomRun accepts the batch it names (1-based, as extraFields.verdict
// says) when the run's rollout is paused on that batch's inconclusive analysis: the rollout goes
// on, as after a person's `inplace-rollout resume`.
const AcceptAnnotation = v1alpha1.AcceptBatchAnnotation

// Pacing of a run while nothing on the cluster says when to look again.
const (
	// pausedRequeue is how often a paused rollout is looked at: a person may accept its batch.
	pausedRequeue = 30 * time.Second
	// minRequeue keeps a step that asks to be called again at once from spinning.
	minRequeue = 200 * time.Millisecond
)

// Reconciler takes one step of one CustomRun: it observes the run and its workload, takes one
// step of the rollout (or of its rollback), and writes the run's status once, with the
// resourceVersion it observed.
type Reconciler struct {
	Engine *rollout.Engine
	// Runs writes CustomRun status.
	Runs tektonv1beta1.CustomRunsGetter
	// Specs reads the InPlaceRollout objects runs reference.
	Specs SpecGetter
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reconcile takes the next step of run and writes its status when it changed. It returns when to
// look again (0: when the run changes). A returned error is worth a retry; the run's status
// already says what is wrong when it is not.
func (r *Reconciler) Reconcile(ctx context.Context, run *v1beta1.CustomRun) (time.Duration, error) {
	if !ours(run) {
		return 0, nil
	}
	switch hold := slices.Contains(run.Finalizers, Finalizer); {
	case run.IsDone() && hold:
		// Nothing is left to roll back should the run be deleted.
		return 0, r.setFinalizer(ctx, run, false)
	case run.IsDone():
		return 0, nil
	case run.DeletionTimestamp == nil && !hold:
		// Before the rollout starts: a run deleted in flight (its PipelineRun deleted, say)
		// rolls back before it goes.
		return 0, r.setFinalizer(ctx, run, true)
	}
	next := run.DeepCopy()
	var target rollout.Ref
	requeue, stepErr := r.step(ctx, next, &target)
	if stepErr != nil && target.Kind != "" {
		stepErr = &rollout.StepError{Target: target, RolloutID: progressFrom(&next.Status).RolloutID, Err: stepErr}
	}
	if left, ok := timeLeft(next, r.now()); ok && !next.IsDone() && (requeue == 0 || left < requeue) {
		// The timeout is looked at when it comes, not at the next change or poll.
		requeue = max(left, minRequeue)
	}
	if equality.Semantic.DeepEqual(next.Status, run.Status) {
		return requeue, stepErr
	}
	if _, err := r.Runs.CustomRuns(run.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		// A conflict means the run changed since it was read (cancelled, say): the next
		// reconcile decides again from what it is now.
		return 0, fmt.Errorf("writing the status of CustomRun %s/%s: %w", run.Namespace, run.Name, err)
	}
	r.logOutcome(run, next, target)
	return requeue, stepErr
}

// step decides and takes run's next step, setting its status, and sets target to the run's
// workload once its spec is read.
func (r *Reconciler) step(ctx context.Context, run *v1beta1.CustomRun, target *rollout.Ref) (time.Duration, error) {
	s := &run.Status
	if !run.HasStarted() {
		// Tekton shows the run as started only from here; the rollout begins with the next step.
		fresh := s.StartTime.IsZero()
		s.InitializeConditions()
		if fresh {
			// The controller's clock, not the global one InitializeConditions reads.
			s.StartTime = &metav1.Time{Time: r.now()}
		}
		return 0, nil
	}
	if len(run.Spec.Workspaces) > 0 {
		s.MarkCustomRunFailed(v1beta1.CustomRunReasonWorkspaceNotSupported.String(),
			"CustomRun %s/%s binds workspaces; an %s uses none: remove them", run.Namespace, run.Name, "InPlaceRollout")
		return 0, nil
	}
	spec, err := decodeSpec(ctx, run, r.Specs)
	var bad *specError
	switch {
	case errors.As(err, &bad) && run.IsCancelled():
		c := cancelled(run)
		s.MarkCustomRunFailed(c.reason, "%s", c.done(fmt.Sprintf("%s; nothing was changed (the spec is wrong: %s)", c.why, bad.msg)))
		return 0, nil
	case errors.As(err, &bad):
		s.MarkCustomRunFailed(ReasonInvalidSpec, "CustomRun %s/%s: %s; nothing was changed", run.Namespace, run.Name, bad.msg)
		return 0, nil
	case err != nil:
		return 0, err
	}
	*target = spec.Target
	if run.DeletionTimestamp != nil {
		// Deleted before it was done: the rollback, after which the finalizer goes.
		return r.stepRollback(ctx, run, spec, stop{reason: v1beta1.CustomRunReasonCancelled.String(), why: "deleted"})
	}
	if why, ok := stopped(run, r.now()); ok {
		return r.stepRollback(ctx, run, spec, why)
	}
	return r.stepRollout(ctx, run, spec)
}

// stop says why a run stops before its rollout ends, in the words of its condition.
type stop struct {
	// reason is the condition's reason, the one Tekton reads.
	reason string
	// why says what stopped the run, naming who did.
	why string
	// remedy, when set, says what keeps the next run from stopping the same way.
	remedy string
}

// done is msg, a stopped run's outcome, with the remedy.
func (s stop) done(msg string) string {
	if s.remedy == "" {
		return msg
	}
	return msg + "; " + s.remedy
}

// stopped says whether run must stop and roll back, and why: cancelled (by a person, or by its
// PipelineRun's cancel or timeout) or past its own timeout.
func stopped(run *v1beta1.CustomRun, now time.Time) (stop, bool) {
	switch {
	case run.IsCancelled():
		return cancelled(run), true
	case timedOut(run, now):
		return stop{reason: v1beta1.CustomRunReasonTimedOut.String(),
			why:    fmt.Sprintf("timed out after %s, its own timeout (spec.timeout: the pipeline task's timeout)", run.GetTimeout()),
			remedy: "to give the rollout more time, raise the pipeline task's timeout"}, true
	}
	return stop{}, false
}

// cancelled is why run, cancelled, stops. Tekton enforces a PipelineRun's timeouts (pipeline,
// tasks, finally) by cancelling its runs with CustomRunCancelledByPipelineTimeoutMsg, and counts
// a run as timed out rather than cancelled only when it then fails with reason
// CustomRunCancelled: so the reason stays CustomRunCancelled, and the message tells the timeout
// from a cancel.
func cancelled(run *v1beta1.CustomRun) stop {
	s := stop{reason: v1beta1.CustomRunReasonCancelled.String()}
	pr := "its PipelineRun"
	if name := run.Labels[pipeline.PipelineRunLabelKey]; name != "" {
		pr = fmt.Sprintf("its PipelineRun %s/%s", run.Namespace, name)
	}
	switch run.Spec.StatusMessage {
	case v1beta1.CustomRunCancelledByPipelineTimeoutMsg:
		s.why = fmt.Sprintf("cancelled by Tekton because %s timed out (its timeouts.pipeline, timeouts.tasks or timeouts.finally)", pr)
		s.remedy = "to give the rollout more time, raise the PipelineRun's timeouts"
	case v1beta1.CustomRunCancelledByPipelineMsg:
		s.why = fmt.Sprintf("cancelled because %s was cancelled", pr)
	case "":
		s.why = fmt.Sprintf("cancelled (spec.status %s)", v1beta1.CustomRunSpecStatusCancelled)
	default:
		s.why = "cancelled: " + string(run.Spec.StatusMessage)
	}
	return s
}

// timedOut reports whether the run's attempt ran longer than its timeout (0: none).
func timedOut(run *v1beta1.CustomRun, now time.Time) bool {
	left, ok := timeLeft(run, now)
	return ok && left <= 0
}

// timeLeft is how long the run's attempt has before its timeout; false when it has none or has
// not started.
func timeLeft(run *v1beta1.CustomRun, now time.Time) (time.Duration, bool) {
	timeout := run.GetTimeout()
	if run.Status.StartTime.IsZero() || timeout <= 0 {
		return 0, false
	}
	return run.Status.StartTime.Add(timeout).Sub(now), true
}

// stepRollout takes the next step of the run's rollout.
func (r *Reconciler) stepRollout(ctx context.Context, run *v1beta1.CustomRun, spec rollout.Spec) (time.Duration, error) {
	s := &run.Status
	// The engine reports a rollout that ended in a step whose status the run does not show
	// (the controller stopped between the two), since prev names it.
	prev := progressFrom(s)
	if p, ok := prev.pause(); ok && run.Annotations[AcceptAnnotation] == strconv.Itoa(p.Batch) {
		st, err := r.Engine.Accept(context.WithoutCancel(ctx), spec.Target, spec.Holder, p)
		switch o := rollout.OutcomeOf(st, err); {
		case o.Kind == rollout.BadInput:
			// The pause is over (accepted, or the rollout moved on): the next step sees where.
		case o.Err != nil:
			return 0, fmt.Errorf("accepting batch %d of %s for CustomRun %s/%s: %w", p.Batch, spec.Target, run.Namespace, run.Name, err)
		default:
			r.runLog(run, spec.Target, p.RolloutID).Info("batch accepted", "batch", p.Batch)
			setProgress(s, prev.next(st, spec.Target.String()))
			s.MarkCustomRunRunning(v1beta1.CustomRunReasonRunning.String(), "batch %d accepted by annotation %s; %s", p.Batch, AcceptAnnotation, rollout.Summary(st))
			return minRequeue, nil
		}
	}
	st, requeue, err := r.Engine.Reconcile(context.WithoutCancel(ctx), spec, prev.status())
	if err != nil {
		return r.engineError(run, st, err)
	}
	return r.settle(run, spec, st, requeue), nil
}

// settle sets the run's condition from the rollout's status, and says when to look again.
func (r *Reconciler) settle(run *v1beta1.CustomRun, spec rollout.Spec, st rollout.Status, after time.Duration) time.Duration {
	s := &run.Status
	setProgress(s, progressFrom(s).next(st, spec.Target.String()))
	switch rollout.OutcomeOf(st, nil).Kind {
	case rollout.Succeeded:
		msg := rollout.OutcomeMessage(st)
		setResults(s, st, msg)
		s.MarkCustomRunSucceeded(v1beta1.CustomRunReasonSuccessful.String(), "%s", msg)
		return 0
	case rollout.RolledBack:
		msg := rollout.OutcomeMessage(st)
		if run.GetRetryCount() < run.Spec.Retries {
			r.retry(run, reasonOf(st, "RolledBack"), msg)
			return 0
		}
		setResults(s, st, msg)
		s.MarkCustomRunFailed(reasonOf(st, "RolledBack"), "%s", msg)
		return 0
	case rollout.NeedsPerson, rollout.Holding:
		// A CustomRun's rollout ends with its run and has no hold point (spec.upTo is refused).
		msg := rollout.OutcomeMessage(st)
		if st.Reason == rollout.ReasonTemplateChanged {
			msg += fmt.Sprintf("; %s stays held by %s: roll it back with `inplace-rollout rollback`, or put the rollout's images back in its template", spec.Target, spec.Holder)
		}
		setResults(s, st, msg)
		s.MarkCustomRunFailed(reasonOf(st, ReasonRollbackIncomplete), "%s", msg)
		return 0
	case rollout.Paused:
		batch := st.Batch
		if st.Analysis != nil {
			batch = st.Analysis.Batch
		}
		s.MarkCustomRunRunning(string(rollout.PhasePaused), "%s; to go on, annotate the CustomRun %s=%d; to roll back, cancel it", rollout.Summary(st), AcceptAnnotation, batch)
		return pausedRequeue
	}
	s.MarkCustomRunRunning(v1beta1.CustomRunReasonRunning.String(), "%s", rollout.Summary(st))
	return max(after, minRequeue)
}

// retry ends the run's attempt, which rolled back, and starts the next: Tekton's contract keeps
// the attempt in retriesStatus and the run Unknown. The next step starts a new rollout from the
// rolled-back workload.
func (r *Reconciler) retry(run *v1beta1.CustomRun, reason, msg string) {
	s := &run.Status
	attempt := s.DeepCopy()
	attempt.RetriesStatus = nil
	attempt.MarkCustomRunFailed(reason, "%s", msg)
	s.RetriesStatus = append(s.RetriesStatus, *attempt)
	s.StartTime = &metav1.Time{Time: r.now()}
	s.CompletionTime = nil
	s.Results = nil
	setProgress(s, Progress{})
	s.MarkCustomRunRunning(ReasonRetrying, "attempt %d of %d rolled back (%s); attempt %d starts", run.GetRetryCount(), run.Spec.Retries+1, reason, run.GetRetryCount()+1)
}

// setFinalizer adds or removes Finalizer on run, with one update carrying the resourceVersion
// read.
func (r *Reconciler) setFinalizer(ctx context.Context, run *v1beta1.CustomRun, hold bool) error {
	next := run.DeepCopy()
	next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == Finalizer })
	if hold {
		next.Finalizers = append(next.Finalizers, Finalizer)
	}
	if _, err := r.Runs.CustomRuns(run.Namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s finalizer %s of CustomRun %s/%s: %w", map[bool]string{true: "adding", false: "removing"}[hold], Finalizer, run.Namespace, run.Name, err)
	}
	return nil
}

// stepRollback takes the next step of the rollback of a run that was cancelled or timed out.
func (r *Reconciler) stepRollback(ctx context.Context, run *v1beta1.CustomRun, spec rollout.Spec, why stop) (time.Duration, error) {
	s := &run.Status
	prev := progressFrom(s)
	st, requeue, err := r.Engine.Abort(context.WithoutCancel(ctx), spec.Rollback(), prev.status())
	o := rollout.OutcomeOf(st, err)
	switch o.Kind {
	case rollout.BadInput:
		// Nothing of this run's holds the workload: it never started, or someone else's
		// rollout does.
		s.MarkCustomRunFailed(why.reason, "%s", why.done(fmt.Sprintf("%s; nothing to roll back: %s", why.why, o.Problem+o.Fix.Choice())))
		return 0, nil
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		return 0, fmt.Errorf("rolling back %s for CustomRun %s/%s (%s): %w", spec.Target, run.Namespace, run.Name, why.why, err)
	case rollout.Refused, rollout.Blocked, rollout.Superseded:
		setProgress(s, prev.next(st, spec.Target.String()))
		s.MarkCustomRunFailed(why.reason, "%s", why.done(fmt.Sprintf("%s; the rollback of %s is incomplete, a person must look: %v", why.why, spec.Target, err)))
		return 0, nil
	}
	setProgress(s, prev.next(st, spec.Target.String()))
	switch o.Kind {
	case rollout.RolledBack:
		msg := why.done(fmt.Sprintf("%s; the rollout of %s was rolled back (%s)", why.why, spec.Target, rollout.OutcomeMessage(st)))
		setResults(s, st, msg)
		s.MarkCustomRunFailed(why.reason, "%s", msg)
		return 0, nil
	case rollout.NeedsPerson:
		msg := why.done(fmt.Sprintf("%s; the rollback of %s is incomplete, a person must look: %s", why.why, spec.Target, rollout.OutcomeMessage(st)))
		setResults(s, st, msg)
		s.MarkCustomRunFailed(why.reason, "%s", msg)
		return 0, nil
	}
	s.MarkCustomRunRunning(string(rollout.PhaseRollingBack), "%s; %s", why.why, rollout.Summary(st))
	return max(requeue, minRequeue), nil
}

// engineError records what an engine error means for the run: bad input, an API error no retry
// fixes, something blocked for a person, or a superseded rollout end it; any other error is
// worth a retry and is returned.
func (r *Reconciler) engineError(run *v1beta1.CustomRun, st rollout.Status, err error) (time.Duration, error) {
	s := &run.Status
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.BadInput:
		s.MarkCustomRunFailed(ReasonRefused, "%v; nothing was changed", err)
	case rollout.Refused:
		s.MarkCustomRunFailed(ReasonAPIError, "%v", err)
	case rollout.Blocked:
		setProgress(s, progressFrom(s).next(st, ""))
		s.MarkCustomRunFailed(reasonOf(st, "Blocked"), "%v", err)
	case rollout.Superseded:
		s.MarkCustomRunFailed(string(rollout.ReasonSuperseded), "%v", err)
	default:
		return 0, fmt.Errorf("CustomRun %s/%s: %w", run.Namespace, run.Name, err)
	}
	return 0, nil
}

// reasonOf is the engine's reason for st, or fallback.
func reasonOf(st rollout.Status, fallback string) string {
	if st.Reason != "" {
		return string(st.Reason)
	}
	return fallback
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// runLog is the log of run's rollout of target: each line names the run, the workload and, when
// known, the rollout.
func (r *Reconciler) runLog(run *v1beta1.CustomRun, target rollout.Ref, rolloutID string) *slog.Logger {
	l := r.log().With("customrun", run.Namespace+"/"+run.Name)
	if target.Kind != "" {
		l = l.With(rollout.LogAttrs(target)...)
	}
	if rolloutID != "" {
		l = l.With("rolloutID", rolloutID)
	}
	return l
}

// logOutcome logs a run's condition when it changed.
func (r *Reconciler) logOutcome(before, after *v1beta1.CustomRun, target rollout.Ref) {
	was, now := before.Status.GetCondition("Succeeded"), after.Status.GetCondition("Succeeded")
	if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason && was.Message == now.Message) {
		return
	}
	r.runLog(after, target, progressFrom(&after.Status).RolloutID).Info("customrun", "succeeded", string(now.Status), "reason", now.Reason, "message", now.Message)
}
