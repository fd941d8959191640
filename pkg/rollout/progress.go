package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// progress advances the batches: it steps the pods in flight, starts pods of the current batch
// while no more than max-unavailable pods are down, and finalizes the workload once every pod is
// updated. A template someone else changed halts the rollout instead (see halt).
func (e *Engine) progress(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	total := w.Replicas()
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseProgressing, Total: total}
	if foreign := workload.ForeignImages(w, lock); foreign != nil {
		return e.halt(ctx, w, lock, foreign, st)
	}
	if lock.Phase == workload.LockHalted {
		// The template has the rollout's images again: someone put them back, and the rollout
		// goes on, its deadline counted from now.
		next := *lock
		next.Phase, next.Reason, next.ReasonCode = workload.LockProgressing, "", ""
		next.ProgressAt = e.now().UTC().Truncate(time.Millisecond)
		if err := w.SetLock(ctx, &next); err != nil {
			return st, Result{}, err
		}
		e.log().Info("resumed: the template has the rollout's images again", "target", w.Ref().String(), "rollout", lock.RolloutID)
		st.Message = "the template has the rollout's images again; resuming"
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
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

	var inflight, pending, arriving []*corev1.Pod
	var failed, updated, unhealthy, down []string
	var ours []*inplace.State
	var soaking []podState // pods this rollout updated, watched through the batch's soak
	var deleting []string
	var batchDone time.Time // when the last pod counted as updated became so
	deadlineOnly := true    // every failed pod failed its progress deadline
	pods := w.Pods()
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			deleting = append(deleting, p.Name) // the controller recreates it; the new pod is judged then
			down = append(down, p.Name)
			continue
		}
		s, err := inplace.ReadState(p)
		if err != nil {
			return st, Result{}, err
		}
		if s != nil && s.RolloutID == lock.RolloutID {
			ours = append(ours, s)
		}
		switch {
		case s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageUpdated:
			updated = append(updated, p.Name)
			soaking = append(soaking, podState{p, s})
			batchDone = latest(batchDone, s.StageAt)
			switch {
			case podReady(p):
			case failingBefore(s):
				// Failing as before its update: reported, and not the rollout's doing.
				unhealthy = append(unhealthy, p.Name)
			default:
				down = append(down, p.Name)
			}
		case s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageFailed:
			failed = append(failed, fmt.Sprintf("pod %s: %s", p.Name, s.Reason))
			deadlineOnly = deadlineOnly && strings.HasPrefix(s.Reason, "ProgressDeadlineExceeded")
		case s != nil && s.RolloutID == lock.RolloutID:
			inflight = append(inflight, p)
			down = append(down, p.Name)
		case s != nil && !s.Stage.Terminal() && slices.Contains(lock.Superseded, s.RolloutID):
			// A superseded update still on this pod: one already patched finishes before the
			// new one starts; one that never got to the images is taken over or cleared (a
			// drained pod gets its readiness gate back).
			inflight = append(inflight, p)
			down = append(down, p.Name)
		case w.Counted(p, lock.Images, labels) && podReady(p):
			updated = append(updated, p.Name)
			batchDone = latest(batchDone, readySince(p))
		case w.Counted(p, lock.Images, labels):
			// Created from the new template (a pod deleted or added meanwhile): it counts once
			// it is Ready, and until then it is down.
			arriving = append(arriving, p)
			down = append(down, p.Name)
		default:
			pending = append(pending, p)
			if !podReady(p) && !unreadySince(p, lock.StartedAt) {
				down = append(down, p.Name)
			}
		}
	}
	st.Updated, st.Unhealthy = len(updated), len(unhealthy)
	if len(failed) > 0 {
		code := ReasonPodFailed
		if deadlineOnly {
			code = ReasonDeadlineExceeded
		}
		return e.beginRollback(ctx, w, lock, code, strings.Join(firstN(failed, 3), "; "), st)
	}

	batches, err := batchCounts(spec.Batches, total)
	if err != nil {
		return st, Result{}, err
	}
	st.Batches = len(batches)
	batch := len(batches) - 1
	for i, n := range batches {
		if st.Updated < n {
			batch = i
			break
		}
	}
	if i := slices.Index(batches, st.Updated); i >= 0 && spec.Soak > 0 && len(inflight) == 0 && !batchDone.IsZero() {
		// The batch is complete since its last pod counted as updated: the last of the pods
		// this rollout updated, or of those the controller created from the new template (a
		// scale-up can complete a batch); its soak runs in full from then.
		if left := batchDone.Add(spec.Soak).Sub(e.now()); left > 0 {
			st.Batch = i + 1
			return e.soak(ctx, w, lock, soaking, left, st)
		}
	}
	if spec.Analysis != nil {
		// A complete batch is analysed before any pod of the next one starts.
		a := lock.AnalyzedBatches
		if a < len(batches) && st.Updated >= batches[a] && len(inflight) == 0 {
			st.Batch = a + 1
			return e.analyze(ctx, spec, w, lock, a, st, updated, podNames(pending))
		}
		batch = min(batch, a)
	}
	st.Batch = batch + 1

	if st.Updated >= total && len(inflight) == 0 && len(pending) == 0 && len(arriving) == 0 && (spec.Analysis == nil || lock.AnalyzedBatches >= len(batches)) {
		done, err := w.Finalize(ctx, lock)
		if err != nil {
			return st, Result{}, err
		}
		if !done {
			st.Message = "finalizing " + w.Ref().String()
			return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
		}
		st.Phase, st.Message = PhaseSucceeded, fmt.Sprintf("%d/%d pods updated in place; %s handed back with the new images", st.Updated, total, w.Ref())
		if len(unhealthy) > 0 {
			st.Message += fmt.Sprintf("; %s", unhealthyNote(unhealthy))
		}
		e.log().Info("rollout succeeded", "target", w.Ref().String(), "rollout", lock.RolloutID, "updated", st.Updated, "unhealthy", st.Unhealthy)
		return st, Result{Phase: PhaseSucceeded, Message: st.Message}, nil
	}

	u := e.updater(spec)
	maxUnavailable, err := resolveMaxUnavailable(spec.MaxUnavailable, total)
	if err != nil {
		return st, Result{}, err
	}
	end := batches[batch]
	if batch == len(batches)-1 {
		// The last batch is every pod, however many there are now: after a scale-down the
		// controller may keep an extra one for a while, and it must not be left behind.
		end = max(end, st.Updated+len(inflight)+len(arriving)+len(pending))
	}
	// Pods the workload should have but does not (deleted, not yet recreated) are down too.
	missing := max(total-len(pods), 0)
	budget := maxUnavailable - len(down) - missing
	room := end - st.Updated - len(inflight) - len(arriving)
	work := slices.Clone(inflight)
	for _, p := range pending {
		if room <= 0 {
			break
		}
		if !podReady(p) && unreadySince(p, lock.StartedAt) {
			// Already down before the rollout started: updating it takes nothing more away.
			work, room = append(work, p), room-1
			continue
		}
		if budget <= 0 {
			break // in order: a later pod does not overtake one that waits
		}
		work, room, budget = append(work, p), room-1, budget-1
	}
	requeue, wrote, failedPod, err := stepPods(work, func(p *corev1.Pod) (inplace.Result, error) {
		res, err := u.UpdatePod(ctx, p, target)
		var ie *inplace.IneligibleError
		if errors.As(err, &ie) && ie.Wait {
			return res, nil
		}
		return res, err
	})
	if err != nil {
		return e.stepFailed(ctx, w, lock, failedPod, err, st)
	}
	// Pods in flight have their own deadline; this one catches a batch whose next pods could
	// not start (unscheduled, not Running, no imageID, others down) or, created from the new
	// template, do not become Ready, for as long.
	waiting := append(slices.Clone(arriving), pending...)
	if wrote == 0 && len(inflight) == 0 && len(waiting) > 0 &&
		e.now().Sub(latest(latest(lastProgress(lock, ours, spec.Soak), batchDone.Add(spec.Soak)), lastChange(waiting))) >= spec.progressDeadline() {
		return e.beginRollback(ctx, w, lock, ReasonDeadlineExceeded, fmt.Sprintf("ProgressDeadlineExceeded: batch %d/%d made no progress within %s: %s",
			st.Batch, st.Batches, spec.progressDeadline(), whyWaiting(arriving, pending, down, missing, maxUnavailable, target)), st)
	}
	started := len(work) - len(inflight)
	st.Updating = len(inflight) + started
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated, %d updating", st.Batch, st.Batches, st.Updated, total, st.Updating)
	if len(unhealthy) > 0 {
		st.Message += "; " + unhealthyNote(unhealthy)
	}
	switch {
	case st.Updating > 0:
	case len(deleting) > 0:
		st.Message += fmt.Sprintf("; waiting for the controller to replace %s, being deleted", strings.Join(firstN(deleting, 3), ", "))
	case len(arriving) > 0:
		st.Message += fmt.Sprintf("; waiting for %s, created from the new template, to be Ready", strings.Join(firstN(podNames(arriving), 3), ", "))
	case len(pending) > 0 && budget <= 0:
		st.Message += fmt.Sprintf("; waiting for %s to be Ready (max-unavailable %d)", strings.Join(firstN(down, 3), ", "), maxUnavailable)
	}
	return st, Result{Phase: PhaseProgressing, RequeueAfter: requeue, Message: st.Message}, nil
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
		e.log().Warn("halted: the template changed under the rollout", "target", w.Ref().String(), "rollout", lock.RolloutID, "template", mustJSON(foreign), "wanted", mustJSON(lock.Images))
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

// soak waits out the soak of a complete batch, failing the rollout if one of the pods it
// updated crashes or restarts meanwhile.
func (e *Engine) soak(ctx context.Context, w workload.Workload, lock *workload.Lock, pods []podState, left time.Duration, st Status) (Status, Result, error) {
	for _, ps := range pods {
		if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
			return e.beginRollback(ctx, w, lock, ReasonPodFailed, fmt.Sprintf("pod %s failed during the soak of batch %d: %s", ps.pod.Name, st.Batch, why), st)
		}
	}
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; soaking, %s left", st.Batch, st.Batches, st.Updated, st.Total, left.Round(time.Second))
	return st, Result{Phase: PhaseProgressing, RequeueAfter: min(left, idleRequeue), Message: st.Message}, nil
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
