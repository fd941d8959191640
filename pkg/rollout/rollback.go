package rollout

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// beginRollback writes lock (with any other change it carries) marked rolling back, and why.
func (e *Engine) beginRollback(ctx context.Context, w workload.Workload, lock *workload.Lock, code Reason, reason string, st Status) (Status, Result, error) {
	next := *lock
	next.Phase, next.Reason, next.ReasonCode = workload.LockRollingBack, reason, string(code)
	if err := w.SetLock(ctx, &next); err != nil {
		return st, Result{}, err
	}
	e.log().Warn("rolling back", "target", w.Ref().String(), "rollout", lock.RolloutID, "reason", code, "message", reason)
	st.Phase, st.Reason, st.Message = PhaseRollingBack, code, "rolling back: "+reason
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// reconcileRollback handles an explicit rollback request: of the rollout in flight, or of the
// last finished one.
func (e *Engine) reconcileRollback(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	switch {
	case lock == nil:
		return Status{}, Result{}, invalid("%s has no in-place rollout recorded; nothing to roll back", w.Ref())
	case lock.Holder != spec.Holder:
		return Status{}, Result{}, invalid("%s was rolled out by %s (rollout %s); only its holder can roll it back", w.Ref(), lock.Holder, lock.RolloutID)
	case lock.Phase == workload.LockRolledBack:
		return e.finished(w, lock, PhaseRolledBack, fmt.Sprintf("rollout %s is rolled back", lock.RolloutID))
	case lock.Phase == workload.LockRollingBack:
		return e.rollBack(ctx, spec, w, lock)
	case lock.Phase == workload.LockProgressing, lock.Phase == workload.LockPaused, lock.Phase == workload.LockHalted:
		return e.beginRollback(ctx, w, lock, ReasonRollbackRequested, rollbackRequested(lock, spec), Status{RolloutID: lock.RolloutID, Total: w.Replicas()})
	}
	// Succeeded: freeze the workload again, then revert the pods as for a failed rollout.
	next := *lock
	next.Phase, next.Reason, next.ReasonCode = workload.LockRollingBack, "rollback requested", string(ReasonRollbackRequested)
	if err := w.Start(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.log().Info("rolling back a finished rollout", "target", w.Ref().String(), "rollout", lock.RolloutID)
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Message: "rolling back"}
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// rollBack reverts every pod the rollout (and the rollouts it superseded) touched, most recent
// first, then restores the workload's previous images and strategy.
func (e *Engine) rollBack(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Reason: Reason(lock.ReasonCode)}
	ours := append(slices.Clone(lock.Superseded), lock.RolloutID)
	var todo, failed []podState
	var strays []*corev1.Pod
	adoption := inplace.Adoption{RolloutID: lock.RolloutID, Images: lock.PreviousImages, ImageIDs: map[string]string{}, Labels: map[string]string{}}
	for _, p := range w.Pods() {
		if p.DeletionTimestamp != nil {
			continue // going away; the controller replaces it from the template Restore puts back
		}
		s, err := inplace.ReadState(p)
		if err != nil {
			return st, Result{}, err
		}
		if s == nil || !slices.Contains(ours, s.RolloutID) {
			// One that does not run (unscheduled, pending) is left to the controller once the
			// template is restored: a revert could never complete on it.
			if w.Ref().Kind != workload.Pods && (s == nil || s.Stage.Terminal()) && p.Status.Phase == corev1.PodRunning &&
				workload.RunsImages(p, lock.Images) && !workload.RunsImages(p, lock.PreviousImages) {
				strays = append(strays, p)
			}
			continue
		}
		for _, c := range s.Containers {
			if c.BeforeImage == lock.PreviousImages[c.Name] && c.BeforeImageID != "" {
				adoption.ImageIDs[c.Name] = c.BeforeImageID
			}
		}
		for k, l := range s.Labels {
			adoption.Labels[k] = l.Before
		}
		switch {
		case s.Stage == inplace.StageRolledBack:
			st.RolledBack++
		case s.Stage == inplace.StageFailed && revertFailed(s):
			failed = append(failed, podState{p, s})
		default:
			todo = append(todo, podState{p, s})
		}
	}
	u := e.updater(spec)
	if len(strays) > 0 {
		// Pods the controller created from the new template while the rollout held the
		// workload: recorded as updated from the previous images, they go back with the rest.
		requeue, _, failedPod, err := stepPods(strays, func(p *corev1.Pod) (inplace.Result, error) { return u.AdoptPod(ctx, p, adoption) })
		if err != nil {
			return st, Result{}, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
		}
		st.Message = fmt.Sprintf("rolling back: %d pods created from the new template meanwhile go back too", len(strays))
		return st, Result{Phase: PhaseRollingBack, RequeueAfter: requeue, Message: st.Message}, nil
	}
	// A failed revert is looked at again: the pod may have got back since (a slow pull
	// finished, a person fixed the cause), and then the rollback goes on.
	var stuck []string
	for _, ps := range failed {
		res, err := u.RevertPod(ctx, ps.pod)
		if err != nil {
			return st, Result{}, fmt.Errorf("pod %s/%s: %w", ps.pod.Namespace, ps.pod.Name, err)
		}
		if res.Stage == inplace.StageRolledBack {
			st.RolledBack++
			continue
		}
		stuck = append(stuck, fmt.Sprintf("pod %s: %s", ps.pod.Name, ps.state.Reason))
	}
	// Most recently started first: the reverse of the order the batches went in. Pods come in
	// update order, so reversing them first also reverses pods that started at the same instant.
	slices.Reverse(todo)
	sort.SliceStable(todo, func(i, j int) bool {
		ri, rj := todo[i].state.Stage == inplace.StageRollingBack, todo[j].state.Stage == inplace.StageRollingBack
		if ri != rj {
			return ri
		}
		return todo[i].state.StartedAt.After(todo[j].state.StartedAt)
	})
	if len(todo) == 0 {
		if len(stuck) > 0 {
			st.Phase, st.Message = PhaseFailed, "rollback incomplete, a person must look: "+strings.Join(stuck, "; ")
			return st, Result{Phase: PhaseFailed, Message: st.Message}, nil
		}
		foreign := workload.ForeignImages(w, lock)
		done, err := w.Restore(ctx, lock, spec.RestoreTemplate)
		if err != nil {
			return st, Result{}, err
		}
		if !done {
			st.Message = "restoring " + w.Ref().String()
			return st, Result{Phase: PhaseRollingBack, RequeueAfter: busyRequeue, Message: st.Message}, nil
		}
		st.Phase = PhaseRolledBack
		st.Message = fmt.Sprintf("rolled back %d pods; %s restored to its previous images (%s): %s", st.RolledBack, w.Ref(), mustJSON(lock.PreviousImages), lock.Reason)
		if foreign != nil && !spec.RestoreTemplate {
			st.Message = fmt.Sprintf("rolled back %d pods to %s; the template keeps %s, set by someone else during the rollout, and %s has its update strategy back, which now applies that template its own way (roll back with --restore-template to put %s back in the template instead): %s",
				st.RolledBack, mustJSON(lock.PreviousImages), mustJSON(foreign), w.Ref(), mustJSON(lock.PreviousImages), lock.Reason)
		}
		e.log().Info("rolled back", "target", w.Ref().String(), "rollout", lock.RolloutID, "pods", st.RolledBack)
		return st, Result{Phase: PhaseRolledBack, Message: st.Message}, nil
	}

	maxUnavailable, err := resolveMaxUnavailable(spec.MaxUnavailable, st.Total)
	if err != nil {
		return st, Result{}, err
	}
	var work []*corev1.Pod
	for _, t := range todo[:min(len(todo), maxUnavailable)] {
		work = append(work, t.pod)
	}
	requeue, _, failedPod, err := stepPods(work, func(p *corev1.Pod) (inplace.Result, error) { return u.RevertPod(ctx, p) })
	if err != nil {
		return st, Result{}, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
	}
	st.Updating = min(len(todo), maxUnavailable)
	st.Message = fmt.Sprintf("rolling back: %d pods reverted, %d to go: %s", st.RolledBack, len(todo), lock.Reason)
	return st, Result{Phase: PhaseRollingBack, RequeueAfter: requeue, Message: st.Message}, nil
}

// revertFailed reports whether a Failed state is a failed revert (its revert images were set).
func revertFailed(s *inplace.State) bool {
	for _, c := range s.Containers {
		if c.RevertImage != "" {
			return true
		}
	}
	return false
}

// rollbackRequested is the reason a requested rollback records; a halted rollout keeps what
// halted it.
func rollbackRequested(lock *workload.Lock, spec Spec) string {
	if lock.Phase != workload.LockHalted {
		return "rollback requested"
	}
	what := "the other person's template stays"
	if spec.RestoreTemplate {
		what = "the template goes back to " + mustJSON(lock.PreviousImages)
	}
	return fmt.Sprintf("rollback requested after %s; %s", lock.Reason, what)
}
