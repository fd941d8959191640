package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// progress advances the batches: it observes the workload (observe), decides the next step
// (decideProgress) and takes it (act): halt, wait, roll back, soak, pull, analyse, hold,
// finalize, or step the pods of the current batch while no more than max-unavailable pods are
// down. The analysis measures first when a measurement is due; what it measured is decided on
// with the rest.
func (e *Engine) progress(ctx context.Context, spec Spec, w workload.Workload, lock *Record) (Status, time.Duration, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseProgressing, Total: w.Replicas()}
	// The last batch analysis the lock records, until this step measures: the verdict the
	// drivers show. One the lock cannot give is the analysis step's to report.
	st.Analysis, _ = decodeRun(lock)
	now := e.now()
	c, err := e.observe(ctx, spec, w, lock, now)
	if err != nil {
		return st, 0, err
	}
	d, err := decideProgress(c, spec, lock, st.Total, now)
	if err != nil {
		return st, 0, err
	}
	if d.counts != nil {
		st.Updated, st.Unhealthy = len(c.updated), len(c.unhealthy)
		st.Batch, st.Batches = d.batch+1, len(d.counts)
	}
	// Whichever lock write the step makes records the pods counted updated now, and the step
	// that wrote it reports them.
	lw, next := &lockWrites{Workload: w}, withReported(lock, c)
	defer func() {
		if lw.wrote {
			e.podsUpdated(w.Ref(), c, d, lock.Reported, next.Reported)
		}
	}()
	if d.action == actAnalyze {
		var requeue time.Duration
		var done bool
		if st, requeue, done, err = e.measure(ctx, spec, lw, next, c, d, st); done {
			return st, requeue, err
		}
		if d, err = decideProgress(c, spec, next, st.Total, now); err != nil {
			return st, 0, err
		}
	}
	return e.act(ctx, spec, lw, next, c, d, st)
}

// act takes the step decided, with the one write it calls for, if any. Every rollback a
// progressing rollout starts, whatever its cause, starts here.
func (e *Engine) act(ctx context.Context, spec Spec, w workload.Workload, lock *Record, c *census, d decision, st Status) (Status, time.Duration, error) {
	switch d.action {
	case actHalt:
		return e.halt(ctx, w, lock, c.foreign, st)
	case actResume:
		// Someone put the rollout's images back: it goes on, its deadline counted from now.
		return e.moveOn(ctx, w, lock, st, "the template has the rollout's images again; resuming")
	case actWaitRevision:
		return waiting(st, busyRequeue, "waiting for the workload controller to record the new revision")
	case actRollBack:
		st, res, err := e.beginRollback(ctx, w, withRun(lock, d.run), d.code(), d.reason, st)
		if err == nil && d.run != nil {
			e.verdict(w.Ref(), string(d.run.Verdict))
		}
		return st, res, err
	case actSoak:
		return waiting(st, min(d.soakLeft, idleRequeue), fmt.Sprintf("batch %d/%d: %d/%d pods updated; soaking, %s left",
			st.Batch, st.Batches, st.Updated, st.Total, d.soakLeft.Round(time.Second)))
	case actPull:
		return e.pull(ctx, w, lock, c, d.pulls, st)
	case actWaitPull:
		return waiting(st, idleRequeue, fmt.Sprintf("batch %d/%d: %d/%d pods updated; waiting for the new images on the nodes of %s",
			st.Batch, st.Batches, st.Updated, st.Total, strings.Join(firstN(d.unpulled, 3), ", ")))
	case actRecord:
		return e.recordMeasurement(ctx, w, lock, d.run, c.nextMeasure, st)
	case actPass:
		return e.passBatch(ctx, w, lock, d, st)
	case actPause:
		return e.pauseBatch(ctx, w, lock, d, st)
	case actHold:
		return e.hold(ctx, w, lock, c, d.upTo, st)
	case actMoveOn:
		return e.moveOn(ctx, w, lock, st, fmt.Sprintf("going on past the hold point at %d pods", lock.HeldAt))
	case actFinalize:
		return e.finalize(ctx, w, lock, c, st)
	}
	return e.stepBatch(ctx, spec, w, lock, c, d, st)
}

// waiting reports a step that writes nothing and looks again after requeue.
func waiting(st Status, requeue time.Duration, msg string) (Status, time.Duration, error) {
	st.Message = msg
	return st, requeue, nil
}

// stepBatch steps the pods decided, once the lock names them, and reports the batch.
func (e *Engine) stepBatch(ctx context.Context, spec Spec, w workload.Workload, lock *Record, c *census, d decision, st Status) (Status, time.Duration, error) {
	if next, ok := recordTouched(c.stateOf, lock, d.work); ok {
		// The lock names a pod before its first write, so that a rollback can find it whatever
		// becomes of its state. The pods are stepped in this same call, once that write is
		// made: a crash between the two leaves what a crash between two calls would, the pods
		// named and not written, and a batch costs no step of its own to record them.
		if err := w.SetLock(ctx, next.encode()); err != nil {
			return st, 0, err
		}
		lock = next
	}
	u := e.updater(spec.GracePeriod, spec.Timeout, e.logFor(w.Ref(), lock.RolloutID))
	requeue, _, failedPod, err := stepPods(d.work, func(p *corev1.Pod) (inplace.Result, error) {
		res, err := u.UpdatePod(ctx, p, c.target)
		if inplace.IsWait(err) {
			return res, nil
		}
		return res, err
	})
	if err == nil && d.startsBatch {
		e.recordOn(ctx, w, lock.RolloutID, batchEvent(d, st, c.target))
	}
	if err != nil {
		// A pod refused now that was not when observed (it changed meanwhile) is observed, and
		// decided on, by the next step.
		return st, 0, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
	}
	// The pods in flight, and the pods started now.
	st.Updating = len(d.work)
	if lock.Phase == PhaseHolding {
		// A pod counted at the hold point is in flight again (unready for a while): the rollout
		// still holds there, and says so.
		st.Phase = PhaseHolding
	}
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated, %d updating", st.Batch, st.Batches, st.Updated, st.Total, st.Updating)
	if len(c.unhealthy) > 0 {
		st.Message += "; " + unhealthyNote(c.unhealthy)
	}
	switch {
	case st.Updating > 0:
	case len(c.deleting) > 0:
		st.Message += fmt.Sprintf("; waiting for the controller to replace %s, being deleted", strings.Join(firstN(c.deleting, 3), ", "))
	case len(c.arriving) > 0:
		st.Message += fmt.Sprintf("; waiting for %s, created from the new template, to be Ready", strings.Join(firstN(podNames(c.arriving), 3), ", "))
	case len(c.pending) > 0 && d.budget <= 0:
		st.Message += fmt.Sprintf("; waiting for %s to be Ready (max-unavailable %d)", strings.Join(firstN(c.down, 3), ", "), d.maxUnavailable)
	}
	return st, requeue, nil
}

// census is what progress observes of the workload, each pod sorted by where it stands in the
// rollout. It decides nothing.
type census struct {
	// foreign are the images and resources someone else put in the template; halted says the lock records
	// such a halt and the template has the rollout's images again; revisionPending says the
	// workload controller has not recorded the revision of the rollout's images yet. Any of
	// them leaves the rest of the census empty: the pods are not looked at then.
	foreign         *workload.Change
	halted          bool
	revisionPending bool
	// target is what the pods are updated to.
	target inplace.Target
	// inflight pods are mid-update (this rollout's, or a superseded one's); pending ones wait
	// for theirs; arriving ones were created from the new template and are not Ready yet.
	inflight, pending, arriving []*corev1.Pod
	// failed are the pods whose update failed; updated, unhealthy, down and deleting name pods.
	failed                             []podFailure
	updated, unhealthy, down, deleting []string
	// ours are the states this rollout wrote; soaking the pods it updated, watched through a
	// batch's soak and after it.
	ours    []*inplace.State
	soaking []podState
	// stateOf is the rollout whose state each pod carries, for each pod with a state; pods
	// being deleted are not read.
	stateOf []podRollout
	// batchDone is when the last pod counted as updated became so; podProgress when the last of
	// the rollout's pods entered a stage, or ended its update and then the soak.
	batchDone, podProgress time.Time
	// missing counts the pods the workload should have but does not (deleted, not recreated).
	missing int
	// refused are the pods, in flight or pending, that can never be updated in place, by name,
	// with why; waiting name the pending pods that cannot start yet: a step writes nothing to
	// them (inplace.Refusal).
	refused map[string]*inplace.IneligibleError
	waiting map[string]bool
	// pullers are the rollout's puller pods, when the spec pre-pulls.
	pullers []corev1.Pod
	// measured is the analysis run the analysis step measured just now, and nextMeasure when
	// its next measurement is due; nil until it measured.
	measured    *analysis.Run
	nextMeasure time.Duration
	// read reads a pod's state (Engine.stateReader); the census only reads the states.
	read func(*corev1.Pod) (*inplace.State, error)
}

// podRollout is the rollout whose state a pod, by UID, carries.
type podRollout struct {
	uid       types.UID
	rolloutID string
}

// podFailure is a pod whose update failed: how (code) and why (reason, in words).
type podFailure struct {
	pod    string
	code   inplace.FailureCode
	reason string
}

// observe is what progress learns of the workload at now, before it decides: whether someone
// changed its template, whether its controller recorded the new revision, its pods sorted by
// where they stand in the rollout of lock and which of them cannot start, and, with pre-pull,
// the rollout's puller pods.
func (e *Engine) observe(ctx context.Context, spec Spec, w workload.Workload, lock *Record, now time.Time) (*census, error) {
	c := &census{}
	if c.foreign = workload.Foreign(w, lock.target()); c.foreign != nil {
		return c, nil
	}
	if lock.Phase == PhaseHalted {
		c.halted = true
		return c, nil
	}
	labels, ok, err := w.RevisionLabels(lock.target())
	if err != nil {
		return nil, err
	}
	if !ok {
		c.revisionPending = true
		return c, nil
	}
	c.target = inplace.Target{Images: lock.Images, Resources: lock.Resources, IncludeInit: spec.IncludeInit, RolloutID: lock.RolloutID,
		Labels: withLabels(labels, spec.Labels), Annotations: spec.Annotations, Supersedes: lock.Superseded, Hooks: spec.Hooks}
	c.refused, c.waiting = map[string]*inplace.IneligibleError{}, map[string]bool{}
	c.read = e.stateReader()
	pods := w.Pods()
	c.missing = max(w.Replicas()-len(pods), 0)
	for _, p := range pods {
		if err := c.observePod(w, lock, p, spec.Soak, now); err != nil {
			return nil, err
		}
	}
	if spec.PrePull {
		if c.pullers, err = prepull.List(ctx, e.Client, w.Ref().Namespace, lock.RolloutID); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// stateReader is how a census reads the pods' states: from the pod lister's decoded states when
// it keeps them (a PodWatch), as a step looks at every pod and most have not changed since the
// last; else each decoded afresh.
func (e *Engine) stateReader() func(*corev1.Pod) (*inplace.State, error) {
	if r, ok := e.Pods.(workload.StateReader); ok {
		return r.ReadState
	}
	return inplace.ReadState
}

// observePod sorts one pod by where it stands in the rollout of lock at now, its state Judged
// from the pod. soak is the batches' soak.
func (c *census) observePod(w workload.Workload, lock *Record, p *corev1.Pod, soak time.Duration, now time.Time) error {
	if p.DeletionTimestamp != nil {
		c.deleting = append(c.deleting, p.Name) // the controller recreates it; the new pod is judged then
		c.down = append(c.down, p.Name)
		return nil
	}
	s, err := c.read(p)
	if err != nil {
		return err
	}
	if s != nil {
		c.stateOf = append(c.stateOf, podRollout{p.UID, s.RolloutID})
	}
	ours := s != nil && s.RolloutID == lock.RolloutID
	stage := inplace.Stage("")
	if ours {
		c.ours = append(c.ours, s)
		stage = inplace.Judged(p, s, now)
		c.podProgress = latest(c.podProgress, s.StageAt)
	}
	switch {
	case ours && stage == inplace.StageUpdated:
		done := inplace.UpdatedAt(p, s)
		c.updated = append(c.updated, p.Name)
		c.soaking = append(c.soaking, podState{p, s})
		c.batchDone = latest(c.batchDone, done)
		c.podProgress = latest(c.podProgress, done.Add(soak))
		switch {
		case inplace.PodReady(p):
		case failingBefore(s):
			// Failing as before its update: reported, and not the rollout's doing.
			c.unhealthy = append(c.unhealthy, p.Name)
		default:
			c.down = append(c.down, p.Name)
		}
	case ours && s.Stage == inplace.StageFailed:
		// Judged Failed and not written yet, the pod is in flight: its next step writes the
		// failure, and the Event that names it.
		c.failed = append(c.failed, podFailure{pod: p.Name, code: s.FailureCode(), reason: s.Reason})
	case ours:
		c.inflight = append(c.inflight, p)
		c.down = append(c.down, p.Name)
	case s != nil && !inplace.Over(p, s, now) && slices.Contains(lock.Superseded, s.RolloutID):
		// A superseded update still on this pod: one already patched finishes before the
		// new one starts; one that never got to the images is taken over or cleared (a
		// drained pod gets its readiness gate back).
		c.inflight = append(c.inflight, p)
		c.down = append(c.down, p.Name)
		c.refusal(p, s, now)
	case w.Counted(p, lock.target(), c.target.Labels) && inplace.PodReady(p):
		c.updated = append(c.updated, p.Name)
		c.batchDone = latest(c.batchDone, readySince(p))
	case w.Counted(p, lock.target(), c.target.Labels):
		// Created from the new template (a pod deleted or added meanwhile): it counts once
		// it is Ready, and until then it is down.
		c.arriving = append(c.arriving, p)
		c.down = append(c.down, p.Name)
	default:
		c.pending = append(c.pending, p)
		// A pod unready since before the rollout started is not its doing, unless a rollout it
		// superseded (whose start is before its own) made it so.
		superseded := s != nil && slices.Contains(lock.Superseded, s.RolloutID)
		if !inplace.PodReady(p) && (superseded || !unreadySince(p, lock.StartedAt)) {
			c.down = append(c.down, p.Name)
		}
		c.refusal(p, s, now)
	}
	return nil
}

// refusal records whether the pod, with state s, cannot be updated in place at now: for good,
// or yet.
func (c *census) refusal(p *corev1.Pod, s *inplace.State, now time.Time) {
	switch r := inplace.Refusal(p, s, c.target, now); {
	case r == nil:
	case r.Wait:
		c.waiting[p.Name] = true
	default:
		c.refused[p.Name] = r
	}
}

// hold records that the rollout reached its hold point, once, and reports it. The workload
// stays held.
func (e *Engine) hold(ctx context.Context, w workload.Workload, lock *Record, c *census, upTo int, st Status) (Status, time.Duration, error) {
	if lock.Phase != PhaseHolding || lock.HeldAt != upTo {
		next := *lock
		next.Phase, next.HeldAt = PhaseHolding, upTo
		if err := w.SetLock(ctx, next.encode()); err != nil {
			return st, 0, err
		}
		e.logFor(w.Ref(), lock.RolloutID).Info("holding", "updated", st.Updated, "upTo", upTo)
		e.recordOn(ctx, w, lock.RolloutID, milestone(corev1.EventTypeNormal, EventRolloutHolding, lock.RolloutID,
			"holds at %d/%d pods updated, its hold point; %s stays held until the rollout is asked to go further or is rolled back", st.Updated, st.Total, w.Ref()))
	}
	st.Phase = PhaseHolding
	st.Message = fmt.Sprintf("holding at %d/%d pods updated; %s stays held until the rollout is asked to go further or is rolled back", st.Updated, st.Total, w.Ref())
	if len(c.unhealthy) > 0 {
		st.Message += "; " + unhealthyNote(c.unhealthy)
	}
	return st, 0, nil
}

// moveOn puts a halted or holding rollout back to progressing, its deadline counted from now.
func (e *Engine) moveOn(ctx context.Context, w workload.Workload, lock *Record, st Status, msg string) (Status, time.Duration, error) {
	next := *lock
	next.Phase, next.Message, next.Reason, next.HeldAt = PhaseProgressing, "", "", 0
	next.ProgressAt = e.now().UTC().Truncate(time.Millisecond)
	if err := w.SetLock(ctx, next.encode()); err != nil {
		return st, 0, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Info("progressing again", "why", msg)
	st.Message = msg
	return st, busyRequeue, nil
}

// finalize hands the workload back with the new images once every pod runs them.
func (e *Engine) finalize(ctx context.Context, w workload.Workload, lock *Record, c *census, st Status) (Status, time.Duration, error) {
	// Puller pods never outlive the rollout.
	if removed, err := e.removePullers(ctx, w.Ref().Namespace, lock.Rollouts()); err != nil || removed {
		st.Message = "removing the puller pods"
		return st, busyRequeue, err
	}
	final := *lock
	final.Phase = PhaseSucceeded
	done, err := w.Finalize(ctx, final.encode(), lock.target())
	if err != nil {
		return st, 0, err
	}
	if !done {
		st.Message = "finalizing " + w.Ref().String()
		return st, busyRequeue, nil
	}
	e.collectPodLocks(ctx, w.Ref())
	st.Phase, st.Message = PhaseSucceeded, fmt.Sprintf("%d/%d pods updated in place; %s handed back with the new %s", st.Updated, st.Total, w.Ref(), changed(lock))
	if len(c.unhealthy) > 0 {
		st.Message += fmt.Sprintf("; %s", unhealthyNote(c.unhealthy))
	}
	e.outcome(ctx, w, lock.RolloutID, milestone(corev1.EventTypeNormal, EventRolloutSucceeded, lock.RolloutID, "succeeded: %s", st.Message), NotifySucceeded, st)
	e.logFor(w.Ref(), lock.RolloutID).Info("rollout succeeded", "updated", st.Updated, "unhealthy", st.Unhealthy)
	return st, 0, nil
}

// changed says what the rollout changes: images, resources, or both.
func changed(lock *Record) string {
	switch {
	case len(lock.Resources) == 0:
		return "images"
	case len(lock.Images) == 0:
		return "resources"
	}
	return "images and resources"
}

// halt stops the rollout on a template someone else changed: nothing is rolled back and their
// template stays, and a person decides. The lock records it (phase Halted, reason
// TemplateChanged), so every driver, and `status`, sees the same until the template has the
// rollout's images again (progress then resumes) or the rollout is rolled back.
func (e *Engine) halt(ctx context.Context, w workload.Workload, lock *Record, foreign *workload.Change, st Status) (Status, time.Duration, error) {
	reason := fmt.Sprintf("someone else changed the template of %s during rollout %s: it has %s now, the rollout wants %s",
		w.Ref(), lock.RolloutID, describeChange(*foreign), describeChange(lock.target()))
	halting := lock.Phase != PhaseHalted
	if halting {
		next := *lock
		next.Phase, next.Message, next.Reason = PhaseHalted, reason, ReasonTemplateChanged
		if err := w.SetLock(ctx, next.encode()); err != nil {
			return st, 0, err
		}
		e.logFor(w.Ref(), lock.RolloutID).Warn("halted: the template changed under the rollout", "template", describeChange(*foreign), "wanted", describeChange(lock.target()))
	}
	st.Updated = countStages(w, lock.RolloutID, e.now())[inplace.StageUpdated]
	st.Phase, st.Reason, st.PreviousImages, st.PreviousResources = PhaseFailed, ReasonTemplateChanged, lock.PreviousImages, lock.PreviousResources
	st.Message = fmt.Sprintf("TemplateChanged: %s. Nothing was rolled back (%d/%d pods run the rollout's images) and %s stays frozen until you decide",
		reason, st.Updated, st.Total, w.Ref())
	if lock.TemplateOwned {
		// Its owner applied a new template: a rollout to it supersedes this one.
		st.Message = fmt.Sprintf("TemplateChanged: %s. Nothing was rolled back (%d/%d pods run the rollout's images); a rollout to the new template goes on from there",
			reason, st.Updated, st.Total)
	}
	if halting {
		next := fmt.Sprintf("%s stays frozen until the template has the rollout's images again or the rollout is rolled back", w.Ref())
		if lock.TemplateOwned {
			next = "a rollout to the new template goes on from there"
		}
		e.outcome(ctx, w, lock.RolloutID, milestone(corev1.EventTypeWarning, EventRolloutHalted, lock.RolloutID,
			"halted: %s; nothing was rolled back, and %s", reason, next), NotifyNeedsPerson, st)
	}
	return st, 0, nil
}

// failingBefore reports whether a container the state changed was already failing before the
// update.
func failingBefore(s *inplace.State) bool {
	for _, c := range s.Containers {
		if c.FailingBefore != "" {
			return true
		}
	}
	return false
}

// unhealthyNote reports the pods left on the new images while failing as before their update.
func unhealthyNote(names []string) string {
	return fmt.Sprintf("%d failing as before the update, left on the new images and not blamed on them: %s", len(names), strings.Join(firstN(names, 5), ", "))
}

// readySince is when the pod last became Ready, or its creation when it records none.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}

// unreadySince reports whether the pod, not Ready now, has been so since t or before: it was
// already down when the rollout started. Both times keep whole seconds, so the same second
// counts as before.
func unreadySince(p *corev1.Pod, t time.Time) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status != corev1.ConditionTrue && !c.LastTransitionTime.After(t)
		}
	}
	return !p.CreationTimestamp.After(t)
}

// countStages counts the pods of w that carry a state of rollout, by their stage as Judged at
// now.
func countStages(w workload.Observed, rollout string, now time.Time) map[inplace.Stage]int {
	n := map[inplace.Stage]int{}
	for _, p := range w.Pods() {
		if s, _ := inplace.ReadState(p); s != nil && s.RolloutID == rollout {
			n[inplace.Judged(p, s, now)]++
		}
	}
	return n
}

// lastProgress is when the rollout last made progress: it started, a batch passed its analysis,
// one of its pods entered a stage, or a pod's update and then its soak ended (c.podProgress).
func lastProgress(lock *Record, c *census) time.Time {
	return latest(latest(lock.StartedAt, lock.ProgressAt), c.podProgress)
}

// lastChange is when any of the pods last changed as its status tells: created, or a
// condition turned. A pod recreated or rescheduled while no driver ran gets its full deadline.
func lastChange(pods []*corev1.Pod) time.Time {
	var t time.Time
	for _, p := range pods {
		t = latest(t, p.CreationTimestamp.Time)
		for _, c := range p.Status.Conditions {
			t = latest(t, c.LastTransitionTime.Time)
		}
	}
	return t
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// whyWaiting says why the batch cannot go on: a pod created from the new template that is not
// Ready, pods down that leave no room under max-unavailable, or why the first of the pending
// pods cannot start; and how many wait.
func whyWaiting(arriving, pending []*corev1.Pod, down []string, missing, maxUnavailable int, target inplace.Target) string {
	if len(arriving) > 0 {
		p := arriving[0]
		return fmt.Sprintf("pod %s/%s, created from the new template, is not Ready: %s", p.Namespace, p.Name, notReadyWhy(p))
	}
	if len(down)+missing >= maxUnavailable {
		what := strings.Join(firstN(down, 3), ", ")
		if missing > 0 {
			what = strings.TrimPrefix(fmt.Sprintf("%s, %d missing", what, missing), ", ")
		}
		return fmt.Sprintf("%d pods down (%s) and max-unavailable is %d, so no more pod may start (and %d pods wait)", len(down)+missing, what, maxUnavailable, len(pending))
	}
	p := pending[0]
	why := fmt.Sprintf("pod %s/%s is waiting", p.Namespace, p.Name)
	if plan, err := inplace.Diff(p, target); err != nil {
		why = err.Error()
	} else if err := inplace.CanUpdate(p, plan); err != nil {
		why = err.Error()
	}
	if len(pending) == 1 {
		return why
	}
	return fmt.Sprintf("%s (and %d more pods waiting)", why, len(pending)-1)
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return names
}

// notReadyWhy is what the pod's containers wait on, or its phase.
func notReadyWhy(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			return fmt.Sprintf("container %q: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
	}
	return fmt.Sprintf("phase %s", p.Status.Phase)
}

// maxTouched bounds the pod names a lock records as touched, so the lock stays small whatever the
// number of pods; beyond it, the lock counts them.
const maxTouched = 100

// recordTouched returns the lock with the pods of work it does not name yet added to its touched
// pods, and whether that changed it. Past maxTouched, it records instead how many pods it set
// out to update without naming them: those of work, and those of the workload that carry a
// state of the rollout (or of one it superseded), by the rollout each pod's state names
// (stateOf). It is the most it ever counted, as those pods may lose their state
// later, and it counts a pod before its first write, so the write that follows changes nothing
// the next step would record again.
func recordTouched(stateOf []podRollout, lock *Record, work []*corev1.Pod) (*Record, bool) {
	next := *lock
	next.Touched = slices.Clone(lock.Touched)
	named := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(next.Touched, func(t TouchedPod) bool { return t.UID == p.UID })
	}
	for _, p := range work {
		if len(next.Touched) < maxTouched && !named(p) {
			next.Touched = append(next.Touched, TouchedPod{Name: p.Name, UID: p.UID})
		}
	}
	if len(next.Touched) >= maxTouched {
		ours := lock.Rollouts()
		unnamed := map[types.UID]bool{}
		for _, p := range work {
			if !named(p) {
				unnamed[p.UID] = true
			}
		}
		for _, s := range stateOf {
			if slices.Contains(ours, s.rolloutID) && !slices.ContainsFunc(next.Touched, func(t TouchedPod) bool { return t.UID == s.uid }) {
				unnamed[s.uid] = true
			}
		}
		next.TouchedMore = max(next.TouchedMore, len(unnamed))
	}
	return &next, len(next.Touched) != len(lock.Touched) || next.TouchedMore != lock.TouchedMore
}

// withLabels is the revision labels with the spec's labels (a rollout to the workload's own
// template has only the latter, see workload.Owned).
func withLabels(revision, spec map[string]string) map[string]string {
	if len(spec) == 0 {
		return revision
	}
	out := maps.Clone(revision)
	if out == nil {
		out = make(map[string]string, len(spec))
	}
	maps.Copy(out, spec)
	return out
}
