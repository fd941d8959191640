package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// progress advances the batches: it observes the pods (observe), decides the next step
// (decideProgress) and takes it: roll back, soak, analyse, hold, finalize, or step the pods of
// the current batch while no more than max-unavailable pods are down. A template someone else
// changed halts the rollout instead (see halt).
func (e *Engine) progress(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	total := w.Replicas()
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseProgressing, Total: total}
	if foreign := workload.ForeignImages(w, lock); foreign != nil {
		return e.halt(ctx, w, lock, foreign, st)
	}
	if lock.Phase == workload.LockHalted {
		// The template has the rollout's images again: someone put them back, and the rollout
		// goes on, its deadline counted from now.
		return e.moveOn(ctx, w, lock, st, "the template has the rollout's images again; resuming")
	}
	labels, ok, err := w.RevisionLabels(lock.Images)
	if err != nil {
		return st, Result{}, err
	}
	if !ok {
		// The controller (or the API server) is behind; the rollout waits for it rather than
		// judge the pods against a revision that does not exist yet.
		st.Message = "waiting for the workload controller to record the new revision"
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
	}
	target := inplace.Target{Images: lock.Images, IncludeInit: spec.IncludeInit, RolloutID: lock.RolloutID, Labels: labels, Supersedes: lock.Superseded}
	c, err := observe(w, lock, labels)
	if err != nil {
		return st, Result{}, err
	}
	d, err := decideProgress(c, spec, lock, total, e.now())
	if err != nil {
		return st, Result{}, err
	}
	st.Updated, st.Unhealthy = len(c.updated), len(c.unhealthy)
	st.Batch, st.Batches = d.batch+1, len(d.counts)
	if spec.PrePull && (d.action == actStep || d.action == actSoak || d.action == actAnalyze) {
		if st, res, done, err := e.prePull(ctx, spec, w, lock, c, &d, st); done {
			return st, res, err
		}
	}
	switch d.action {
	case actRollBack:
		return e.beginRollback(ctx, w, lock, d.code, d.reason, st)
	case actSoak:
		st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; soaking, %s left", st.Batch, st.Batches, st.Updated, st.Total, d.soakLeft.Round(time.Second))
		return st, Result{Phase: PhaseProgressing, RequeueAfter: min(d.soakLeft, idleRequeue), Message: st.Message}, nil
	case actAnalyze:
		return e.analyze(ctx, spec, w, lock, d.batch, d.counts[d.batch], st, c.updated, podNames(c.pending))
	case actHold:
		return e.hold(ctx, w, lock, c, d.upTo, st)
	case actMoveOn:
		return e.moveOn(ctx, w, lock, st, fmt.Sprintf("going on past the hold point at %d pods", lock.HeldAt))
	case actFinalize:
		return e.finalize(ctx, w, lock, c, st)
	}

	if next, ok := recordTouched(w, lock, d.work); ok {
		// The lock names a pod before its first write, so that a rollback can find it whatever
		// becomes of its state; the pods are stepped on the next call.
		if err := w.SetLock(ctx, next); err != nil {
			return st, Result{}, err
		}
		st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; recording the pods to update", st.Batch, st.Batches, st.Updated, total)
		// The next call steps them: it reads the lock afresh, so it need not wait.
		return st, Result{Phase: PhaseProgressing, RequeueAfter: minRequeue, Message: st.Message}, nil
	}
	u := e.updater(spec.GracePeriod, spec.Timeout, e.logFor(w.Ref(), lock.RolloutID))
	var updatedNow atomic.Int32
	requeue, wrote, failedPod, err := stepPods(d.work, func(p *corev1.Pod) (inplace.Result, error) {
		res, err := u.UpdatePod(ctx, p, target)
		if err == nil && countUpdated(res) {
			updatedNow.Add(1)
		}
		var ie *inplace.IneligibleError
		if errors.As(err, &ie) && ie.Wait {
			return res, nil
		}
		return res, err
	})
	e.podsUpdated(w.Ref(), c, d, int(updatedNow.Load()))
	if err != nil {
		return e.stepFailed(ctx, w, lock, failedPod, err, st)
	}
	if wrote == 0 && batchStalled(c, lock, spec, e.now()) {
		return e.beginRollback(ctx, w, lock, ReasonDeadlineExceeded, fmt.Sprintf("ProgressDeadlineExceeded: batch %d/%d made no progress within %s: %s",
			st.Batch, st.Batches, spec.progressDeadline(), whyWaiting(c.arriving, c.pending, c.down, c.missing, d.maxUnavailable, target)), st)
	}
	started := len(d.work) - len(c.inflight)
	st.Updating = len(c.inflight) + started
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated, %d updating", st.Batch, st.Batches, st.Updated, total, st.Updating)
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
	return st, Result{Phase: PhaseProgressing, RequeueAfter: requeue, Message: st.Message}, nil
}

// census is what progress observes of the workload's pods, each sorted by where it stands in
// the rollout. It decides nothing.
type census struct {
	// inflight pods are mid-update (this rollout's, or a superseded one's); pending ones wait
	// for theirs; arriving ones were created from the new template and are not Ready yet.
	inflight, pending, arriving []*corev1.Pod
	// failed describes the pods whose update failed; updated, unhealthy, down and deleting
	// name pods.
	failed, updated, unhealthy, down, deleting []string
	// ours are the states this rollout wrote; soaking the pods it updated, watched through a
	// batch's soak and after it.
	ours    []*inplace.State
	soaking []podState
	// batchDone is when the last pod counted as updated became so.
	batchDone time.Time
	// deadlineOnly says every failed pod failed its progress deadline.
	deadlineOnly bool
	// missing counts the pods the workload should have but does not (deleted, not recreated).
	missing int
}

// observe sorts the workload's pods by where they stand in the rollout of lock.
func observe(w workload.Workload, lock *workload.Lock, labels map[string]string) (*census, error) {
	c := &census{deadlineOnly: true}
	pods := w.Pods()
	c.missing = max(w.Replicas()-len(pods), 0)
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			c.deleting = append(c.deleting, p.Name) // the controller recreates it; the new pod is judged then
			c.down = append(c.down, p.Name)
			continue
		}
		s, err := inplace.ReadState(p)
		if err != nil {
			return nil, err
		}
		ours := s != nil && s.RolloutID == lock.RolloutID
		if ours {
			c.ours = append(c.ours, s)
		}
		switch {
		case ours && s.Stage == inplace.StageUpdated:
			c.updated = append(c.updated, p.Name)
			c.soaking = append(c.soaking, podState{p, s})
			c.batchDone = latest(c.batchDone, s.StageAt)
			switch {
			case inplace.PodReady(p):
			case failingBefore(s):
				// Failing as before its update: reported, and not the rollout's doing.
				c.unhealthy = append(c.unhealthy, p.Name)
			default:
				c.down = append(c.down, p.Name)
			}
		case ours && s.Stage == inplace.StageFailed:
			c.failed = append(c.failed, fmt.Sprintf("pod %s: %s", p.Name, s.Reason))
			c.deadlineOnly = c.deadlineOnly && strings.HasPrefix(s.Reason, "ProgressDeadlineExceeded")
		case ours:
			c.inflight = append(c.inflight, p)
			c.down = append(c.down, p.Name)
		case s != nil && !s.Stage.Terminal() && slices.Contains(lock.Superseded, s.RolloutID):
			// A superseded update still on this pod: one already patched finishes before the
			// new one starts; one that never got to the images is taken over or cleared (a
			// drained pod gets its readiness gate back).
			c.inflight = append(c.inflight, p)
			c.down = append(c.down, p.Name)
		case w.Counted(p, lock.Images, labels) && inplace.PodReady(p):
			c.updated = append(c.updated, p.Name)
			c.batchDone = latest(c.batchDone, readySince(p))
		case w.Counted(p, lock.Images, labels):
			// Created from the new template (a pod deleted or added meanwhile): it counts once
			// it is Ready, and until then it is down.
			c.arriving = append(c.arriving, p)
			c.down = append(c.down, p.Name)
		default:
			c.pending = append(c.pending, p)
			if !inplace.PodReady(p) && !unreadySince(p, lock.StartedAt) {
				c.down = append(c.down, p.Name)
			}
		}
	}
	return c, nil
}

// action is the next step of a progressing rollout.
type action int

const (
	// actStep steps the pods in flight and starts pods of the current batch.
	actStep action = iota
	actRollBack
	actSoak
	actAnalyze
	actHold
	// actMoveOn leaves the hold point: the rollout may go further now.
	actMoveOn
	actFinalize
)

// decision is what decideProgress chose, with what the step needs.
type decision struct {
	action action
	// counts are the batches' cumulative pod counts, the hold point among them; batch is the
	// 0-based index of the batch in progress (actAnalyze: the batch analysed).
	counts []int
	batch  int
	// code and reason say why to roll back.
	code   Reason
	reason string
	// soakLeft is how long the batch still soaks.
	soakLeft time.Duration
	// upTo is the hold point as a pod count.
	upTo int
	// work are the pods to step (actStep); budget how many more pods could have gone down
	// under maxUnavailable.
	work                   []*corev1.Pod
	budget, maxUnavailable int
}

// decideProgress decides the next step of a progressing rollout from what observe saw, alone:
// why a rollout rolls back on its pods, soaks, analyses, holds, finalizes or steps is decided
// here, in this order.
func decideProgress(c *census, spec Spec, lock *workload.Lock, total int, now time.Time) (decision, error) {
	var d decision
	counts, err := batchCounts(spec.Batches, total)
	if err != nil {
		return d, err
	}
	upTo, err := resolveUpTo(spec.UpTo, total)
	if err != nil {
		return d, err
	}
	counts = withHoldPoint(counts, upTo)
	d.counts, d.upTo = counts, upTo
	updated := len(c.updated)
	d.batch = len(counts) - 1
	for i, n := range counts {
		if updated < n {
			d.batch = i
			break
		}
	}
	if len(c.failed) > 0 {
		d.action, d.code, d.reason = actRollBack, ReasonPodFailed, strings.Join(firstN(c.failed, 3), "; ")
		if c.deadlineOnly {
			d.code = ReasonDeadlineExceeded
		}
		return d, nil
	}
	if i := slices.Index(counts, updated); i >= 0 && spec.Soak > 0 && len(c.inflight) == 0 && !c.batchDone.IsZero() {
		// The batch is complete since its last pod counted as updated: the last of the pods
		// this rollout updated, or of those the controller created from the new template (a
		// scale-up can complete a batch); its soak runs in full from then.
		if left := c.batchDone.Add(spec.Soak).Sub(now); left > 0 {
			d.batch = i
			for _, ps := range c.soaking {
				if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
					d.action, d.code = actRollBack, ReasonPodFailed
					d.reason = fmt.Sprintf("pod %s failed during the soak of batch %d: %s", ps.pod.Name, i+1, why)
					return d, nil
				}
			}
			d.action, d.soakLeft = actSoak, left
			return d, nil
		}
	}
	for _, ps := range c.soaking {
		// Past its soak, a pod this rollout updated that crashes or keeps restarting on the new
		// images still fails the rollout: counting it as merely down would stall the next batch
		// until the progress deadline.
		if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
			d.action, d.code = actRollBack, ReasonPodFailed
			d.reason = fmt.Sprintf("pod %s failed after its update: %s", ps.pod.Name, why)
			return d, nil
		}
	}
	// Progress of the analysis is the pod count accepted. Until the batch of every pod passed,
	// a count at or above the pods there are now (the workload was scaled down) still leaves
	// the last batch to analyse.
	acceptedPods := lock.AcceptedPods
	if !lock.AcceptedAll {
		acceptedPods = min(acceptedPods, total-1)
	}
	if spec.Analysis != nil {
		// A complete batch is analysed before any pod of the next one starts: the first batch
		// that ends above the count accepted.
		a := len(counts)
		for i, n := range counts {
			if n > acceptedPods {
				a = i
				break
			}
		}
		if a < len(counts) && updated >= counts[a] && len(c.inflight) == 0 {
			d.action, d.batch = actAnalyze, a
			return d, nil
		}
		d.batch = min(d.batch, a)
	}
	accepted := func(n int) bool { return spec.Analysis == nil || acceptedPods >= n }
	if upTo < total && updated >= upTo && len(c.inflight) == 0 && accepted(upTo) {
		d.action, d.batch = actHold, slices.Index(counts, upTo)
		return d, nil
	}
	if lock.Phase == workload.LockHolding {
		d.action = actMoveOn
		return d, nil
	}
	if updated >= total && len(c.inflight) == 0 && len(c.pending) == 0 && len(c.arriving) == 0 && accepted(total) {
		d.action = actFinalize
		return d, nil
	}

	d.maxUnavailable, err = resolveMaxUnavailable(spec.MaxUnavailable, total)
	if err != nil {
		return d, err
	}
	end := counts[d.batch]
	if d.batch == len(counts)-1 {
		// The last batch is every pod, however many there are now: after a scale-down the
		// controller may keep an extra one for a while, and it must not be left behind.
		end = max(end, updated+len(c.inflight)+len(c.arriving)+len(c.pending))
	}
	if upTo < total {
		// No pod starts past the hold point, even one lowered below what is updated or in
		// flight: those finish, and the rollout holds there.
		end = min(end, max(upTo, updated+len(c.inflight)+len(c.arriving)))
	}
	d.budget = d.maxUnavailable - len(c.down) - c.missing
	room := end - updated - len(c.inflight) - len(c.arriving)
	d.work = slices.Clone(c.inflight)
	for _, p := range c.pending {
		if room <= 0 {
			break
		}
		if !inplace.PodReady(p) && unreadySince(p, lock.StartedAt) {
			// Already down before the rollout started: updating it takes nothing more away.
			d.work, room = append(d.work, p), room-1
			continue
		}
		if d.budget <= 0 {
			break // in order: a later pod does not overtake one that waits
		}
		d.work, room, d.budget = append(d.work, p), room-1, d.budget-1
	}
	return d, nil
}

// batchStalled reports whether the batch made no progress within the progress deadline: no pod
// is in flight (those have their own deadline), and the batch's next pods could not start
// (unscheduled, not Running, no imageID, others down) or, created from the new template, did
// not become Ready, for as long. Decided after a step that wrote nothing.
func batchStalled(c *census, lock *workload.Lock, spec Spec, now time.Time) bool {
	waiting := append(slices.Clone(c.arriving), c.pending...)
	if len(c.inflight) > 0 || len(waiting) == 0 {
		return false
	}
	since := latest(latest(lastProgress(lock, c.ours, spec.Soak), c.batchDone.Add(spec.Soak)), lastChange(waiting))
	return now.Sub(since) >= spec.progressDeadline()
}

// withHoldPoint adds the hold point to the batches' counts, so that it ends a batch: the pods up
// to it soak and are analysed before the rollout holds there.
func withHoldPoint(counts []int, upTo int) []int {
	if slices.Contains(counts, upTo) {
		return counts
	}
	out := slices.Clone(counts)
	i, _ := slices.BinarySearch(out, upTo)
	return slices.Insert(out, i, upTo)
}

// hold records that the rollout reached its hold point, once, and reports it. The workload
// stays held.
func (e *Engine) hold(ctx context.Context, w workload.Workload, lock *workload.Lock, c *census, upTo int, st Status) (Status, Result, error) {
	if lock.Phase != workload.LockHolding || lock.HeldAt != upTo {
		next := *lock
		next.Phase, next.HeldAt = workload.LockHolding, upTo
		if err := w.SetLock(ctx, &next); err != nil {
			return st, Result{}, err
		}
		e.logFor(w.Ref(), lock.RolloutID).Info("holding", "updated", st.Updated, "upTo", upTo)
	}
	st.Phase = PhaseHolding
	st.Message = fmt.Sprintf("holding at %d/%d pods updated; %s stays held until the rollout is asked to go further or is rolled back", st.Updated, st.Total, w.Ref())
	if len(c.unhealthy) > 0 {
		st.Message += "; " + unhealthyNote(c.unhealthy)
	}
	return st, Result{Phase: PhaseHolding, Message: st.Message}, nil
}

// moveOn puts a halted or holding rollout back to progressing, its deadline counted from now.
func (e *Engine) moveOn(ctx context.Context, w workload.Workload, lock *workload.Lock, st Status, msg string) (Status, Result, error) {
	next := *lock
	next.Phase, next.Reason, next.ReasonCode, next.HeldAt = workload.LockProgressing, "", "", 0
	next.ProgressAt = e.now().UTC().Truncate(time.Millisecond)
	if err := w.SetLock(ctx, &next); err != nil {
		return st, Result{}, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Info("progressing again", "why", msg)
	st.Message = msg
	return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
}

// finalize hands the workload back with the new images once every pod runs them.
func (e *Engine) finalize(ctx context.Context, w workload.Workload, lock *workload.Lock, c *census, st Status) (Status, Result, error) {
	// Puller pods never outlive the rollout.
	if removed, err := e.removePullers(ctx, w.Ref().Namespace, lock.Rollouts()); err != nil || removed {
		st.Message = "removing the puller pods"
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, err
	}
	done, err := w.Finalize(ctx, lock)
	if err != nil {
		return st, Result{}, err
	}
	if !done {
		st.Message = "finalizing " + w.Ref().String()
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
	}
	st.Phase, st.Message = PhaseSucceeded, fmt.Sprintf("%d/%d pods updated in place; %s handed back with the new images", st.Updated, st.Total, w.Ref())
	if len(c.unhealthy) > 0 {
		st.Message += fmt.Sprintf("; %s", unhealthyNote(c.unhealthy))
	}
	e.logFor(w.Ref(), lock.RolloutID).Info("rollout succeeded", "updated", st.Updated, "unhealthy", st.Unhealthy)
	return st, Result{Phase: PhaseSucceeded, Message: st.Message}, nil
}

// halt stops the rollout on a template someone else changed: nothing is rolled back and their
// template stays, and a person decides. The lock records it (phase Halted, reason
// TemplateChanged), so every driver, and `status`, sees the same until the template has the
// rollout's images again (progress then resumes) or the rollout is rolled back.
func (e *Engine) halt(ctx context.Context, w workload.Workload, lock *workload.Lock, foreign map[string]string, st Status) (Status, Result, error) {
	reason := fmt.Sprintf("someone else changed the template of %s during rollout %s: it has %s now, the rollout wants %s",
		w.Ref(), lock.RolloutID, mustJSON(foreign), mustJSON(lock.Images))
	if lock.Phase != workload.LockHalted {
		next := *lock
		next.Phase, next.Reason, next.ReasonCode = workload.LockHalted, reason, string(ReasonTemplateChanged)
		if err := w.SetLock(ctx, &next); err != nil {
			return st, Result{}, err
		}
		e.logFor(w.Ref(), lock.RolloutID).Warn("halted: the template changed under the rollout", "template", mustJSON(foreign), "wanted", mustJSON(lock.Images))
	}
	for _, p := range w.Pods() {
		if s, _ := inplace.ReadState(p); s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageUpdated {
			st.Updated++
		}
	}
	st.Phase, st.Reason, st.PreviousImages = PhaseFailed, ReasonTemplateChanged, lock.PreviousImages
	st.Message = fmt.Sprintf("TemplateChanged: %s. Nothing was rolled back (%d/%d pods run the rollout's images) and %s stays frozen until you decide",
		reason, st.Updated, st.Total, w.Ref())
	return st, Result{Phase: PhaseFailed, Message: st.Message}, nil
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

// lastProgress is when the rollout last made progress: it started, a batch passed its analysis,
// one of its pods entered a stage, or a batch's soak ended.
func lastProgress(lock *workload.Lock, states []*inplace.State, soak time.Duration) time.Time {
	t := latest(lock.StartedAt, lock.ProgressAt)
	for _, s := range states {
		at := s.StageAt
		if s.Stage == inplace.StageUpdated {
			at = at.Add(soak)
		}
		t = latest(t, at)
	}
	return t
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

// stepFailed handles an error from a pod step: bad input on the pod (it cannot be updated in
// place) fails the rollout; API trouble is retried.
func (e *Engine) stepFailed(ctx context.Context, w workload.Workload, lock *workload.Lock, p *corev1.Pod, err error, st Status) (Status, Result, error) {
	var ie *inplace.IneligibleError
	if errors.As(err, &ie) && !ie.Wait {
		return e.beginRollback(ctx, w, lock, ReasonPodFailed, err.Error(), st)
	}
	return st, Result{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
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
// pods, and whether that changed it. Past maxTouched, it records instead how many of the
// workload's pods carry a state of the rollout (or of one it superseded) without being named:
// the most it ever saw, as those pods may lose their state later.
func recordTouched(w workload.Workload, lock *workload.Lock, work []*corev1.Pod) (*workload.Lock, bool) {
	next := *lock
	next.Touched = slices.Clone(lock.Touched)
	named := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(next.Touched, func(t workload.TouchedPod) bool { return t.UID == p.UID })
	}
	for _, p := range work {
		if len(next.Touched) < maxTouched && !named(p) {
			next.Touched = append(next.Touched, workload.TouchedPod{Name: p.Name, UID: p.UID})
		}
	}
	if len(next.Touched) >= maxTouched {
		ours := lock.Rollouts()
		unnamed := 0
		for _, p := range w.Pods() {
			if s, _ := inplace.ReadState(p); s != nil && slices.Contains(ours, s.RolloutID) && !named(p) {
				unnamed++
			}
		}
		next.TouchedMore = max(next.TouchedMore, unnamed)
	}
	return &next, len(next.Touched) != len(lock.Touched) || next.TouchedMore != lock.TouchedMore
}
