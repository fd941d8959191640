package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// RollbackSpec is a rollback asked for: undo the workload's last rollout, in flight or
// finished. It is an operation, not part of a rollout's spec: a driver asks for it once.
type RollbackSpec struct {
	// Target is the workload; its namespace is the caller's.
	Target workload.Ref
	// Holder names who asks; only the rollout's holder may roll it back.
	Holder string
	// HolderUID is the UID of the object Holder names, when it names one (Spec.HolderUID).
	HolderUID types.UID
	// TakeOver rolls back a rollout another holder left, once that holder no longer exists
	// (Spec.TakeOver).
	TakeOver bool
	// MaxUnavailable is how many pods are reverted at once (count or percentage, above 0).
	MaxUnavailable intstr.IntOrString
	// GracePeriod is the wait between draining a pod (readiness gate False) and its restart.
	GracePeriod time.Duration
	// Timeout is the progress deadline of a pod's revert, above 0.
	Timeout time.Duration
	// RestoreTemplate puts the previous images back in the workload's template even when
	// someone else changed it during the rollout. Without it, their template stays and only
	// the pods and the update strategy are restored.
	RestoreTemplate bool
}

// Validate checks the rollback without looking at the cluster.
func (r RollbackSpec) Validate() error {
	if err := checkTarget(r.Target); err != nil {
		return err
	}
	if _, err := resolveMaxUnavailable(r.MaxUnavailable, 100); err != nil {
		return err
	}
	if r.GracePeriod < 0 || r.Timeout < 0 {
		return invalid("grace and timeout cannot be negative")
	}
	return checkTimeout(r.Timeout)
}

// Abort takes one bounded step of a rollback, like Reconcile does of a rollout: it marks the
// rollout in flight (or the last finished one) as rolling back, reverts the next pods, or
// restores the workload. Its errors are typed as Reconcile's are.
func (e *Engine) Abort(ctx context.Context, r RollbackSpec, prev Status) (Status, Result, error) {
	st, res, err := e.abort(ctx, r, prev)
	return st, res, classify(err, st)
}

func (e *Engine) abort(ctx context.Context, r RollbackSpec, prev Status) (Status, Result, error) {
	if err := r.Validate(); err != nil {
		return prev, Result{}, err
	}
	w, err := workload.Load(ctx, e.Client, r.Target)
	if err != nil {
		return prev, Result{}, asInvalid(err)
	}
	return e.reconcileRollback(ctx, r, w, w.Lock())
}

// beginRollback writes lock (with any other change it carries) marked rolling back, and why.
func (e *Engine) beginRollback(ctx context.Context, w workload.Workload, lock *workload.Lock, code Reason, reason string, st Status) (Status, Result, error) {
	next := *lock
	next.Phase, next.Reason, next.ReasonCode = workload.LockRollingBack, reason, string(code)
	if err := w.SetLock(ctx, &next); err != nil {
		// The rollout failed and its rollback could not begin: as incomplete as a rollback gets.
		st.Phase, st.Message = PhaseRollingBack, "rolling back: "+reason
		return st, Result{}, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Warn("rolling back", "reason", code, "message", reason)
	st.Phase, st.Reason, st.Message = PhaseRollingBack, code, "rolling back: "+reason
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// reconcileRollback handles an explicit rollback request: of the rollout in flight, or of the
// last finished one.
func (e *Engine) reconcileRollback(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	switch {
	case lock == nil:
		return Status{}, Result{}, invalid("%s has no in-place rollout recorded; nothing to roll back", w.Ref())
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && !spec.TakeOver:
		return Status{}, Result{}, holderRefusal(w, lock, spec.Holder, "roll it back")
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && lock.Phase != workload.LockRolledBack:
		return e.takeOver(ctx, w, lock, spec.Holder, spec.HolderUID)
	case lock.Phase == workload.LockRolledBack:
		return e.finished(w, lock, PhaseRolledBack, fmt.Sprintf("rollout %s is rolled back", lock.RolloutID))
	case lock.Phase == workload.LockRollingBack:
		return e.rollBack(ctx, spec, w, lock)
	case lock.Phase == workload.LockProgressing, lock.Phase == workload.LockPaused, lock.Phase == workload.LockHalted, lock.Phase == workload.LockHolding:
		return e.beginRollback(ctx, w, lock, ReasonRollbackRequested, rollbackRequested(lock, spec), Status{RolloutID: lock.RolloutID, Total: w.Replicas()})
	}
	// Succeeded: freeze the workload again, then revert the pods as for a failed rollout.
	next := *lock
	next.Phase, next.Reason, next.ReasonCode = workload.LockRollingBack, "rollback requested", string(ReasonRollbackRequested)
	if err := w.Start(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Info("rolling back a finished rollout")
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Message: "rolling back"}
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// rollBack reverts every pod the rollout (and the rollouts it superseded) touched, most recent
// first, then restores the workload's previous images and strategy.
func (e *Engine) rollBack(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Reason: Reason(lock.ReasonCode)}
	ours := lock.Rollouts()
	var todo, failed []podState
	var strays []*corev1.Pod
	// stuck are pods a person must look at; skipped, pods left alone that the rollout did not touch.
	var stuck, skipped []string
	adoption := inplace.Adoption{RolloutID: lock.RolloutID, Images: lock.PreviousImages, ImageIDs: map[string]string{}, Labels: map[string]string{}}
	before := lockBeforeImages(lock)
	pods, byName, err := e.rollbackPods(ctx, w, ours)
	if err != nil {
		return st, Result{}, err
	}
	// found are the pods that carry a state of the rollout, or go back with it as strays.
	found := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue // going away; the controller replaces it from the template Restore puts back
		}
		s, err := inplace.ReadState(p)
		var unreadable *inplace.StateError
		switch {
		case errors.As(err, &unreadable) && untouched(w, lock, before, p):
			skipped = append(skipped, p.Name)
			continue
		case errors.As(err, &unreadable):
			found[p.UID] = true
			stuck = append(stuck, fmt.Sprintf("%v; restore it or remove it and put the pod's images back by hand, then run rollback again", err))
			continue
		case err != nil:
			return st, Result{}, err
		}
		if s == nil || !slices.Contains(ours, s.RolloutID) {
			// One that does not run (unscheduled, pending) is left to the controller once the
			// template is restored: a revert could never complete on it.
			if w.Ref().Kind != workload.Pods && (s == nil || s.Stage.Terminal()) && p.Status.Phase == corev1.PodRunning &&
				workload.RunsImages(p, lock.Images) && !workload.RunsImages(p, lock.PreviousImages) {
				strays = append(strays, p)
				found[p.UID] = true
			}
			continue
		}
		found[p.UID] = true
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
			// A state edited to name another image is not followed: the pod stays for a person.
			if err := inplace.CheckRevert(p, s, revertImages(w, lock, before)); err != nil {
				stuck = append(stuck, err.Error())
				continue
			}
			todo = append(todo, podState{p, s})
		}
	}
	lost, notes := lostPods(lock, before, byName, found)
	stuck = append(stuck, lost...)
	if len(skipped) > 0 {
		notes += fmt.Sprintf("; skipped %s: state annotation %s unreadable, and not touched by the rollout (it runs the previous images)",
			strings.Join(firstN(skipped, 5), ", "), inplace.StateAnnotation)
	}
	if len(stuck) > 0 && len(todo) > 0 {
		notes += fmt.Sprintf("; %d pods need a person: %s", len(stuck), strings.Join(firstN(stuck, 3), "; "))
	}
	u := e.updater(spec.GracePeriod, spec.Timeout, e.logFor(w.Ref(), lock.RolloutID))
	u.Options.RevertImages = revertImages(w, lock, before)
	u.TagMoved = e.tagMoved(ctx, w.Ref().Namespace, pods)
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
		// Puller pods never outlive the rollout, even one whose rollback a person must finish.
		if removed, err := e.removePullers(ctx, w.Ref().Namespace, ours); err != nil || removed {
			st.Message = "rolling back: removing the puller pods"
			return st, Result{Phase: PhaseRollingBack, RequeueAfter: busyRequeue, Message: st.Message}, err
		}
		if len(stuck) > 0 {
			st.Phase, st.Message = PhaseFailed, "rollback incomplete, a person must look: "+strings.Join(firstN(stuck, 5), "; ")+notes
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
		st.Message = fmt.Sprintf("rolled back %d pods; %s restored to its previous images (%s): %s", st.RolledBack, w.Ref(), mustJSON(lock.PreviousImages), lock.Reason) + notes
		if foreign != nil && !spec.RestoreTemplate {
			st.Message = fmt.Sprintf("rolled back %d pods to %s; the template keeps %s, set by someone else during the rollout, and %s has its update strategy back, which now applies that template its own way (a rollback that restores the template would have put %s back in it instead): %s",
				st.RolledBack, mustJSON(lock.PreviousImages), mustJSON(foreign), w.Ref(), mustJSON(lock.PreviousImages), lock.Reason) + notes
		}
		e.rolledBack(w.Ref())
		e.logFor(w.Ref(), lock.RolloutID).Info("rolled back", "pods", st.RolledBack)
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
	st.Message = fmt.Sprintf("rolling back: %d pods reverted, %d to go: %s%s", st.RolledBack, len(todo), lock.Reason, notes)
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
func rollbackRequested(lock *workload.Lock, spec RollbackSpec) string {
	if lock.Phase != workload.LockHalted {
		return "rollback requested"
	}
	what := "the other person's template stays"
	if spec.RestoreTemplate {
		what = "the template goes back to " + mustJSON(lock.PreviousImages)
	}
	return fmt.Sprintf("rollback requested after %s; %s", lock.Reason, what)
}

// rollbackPods are the workload's pods and, from the rest of the namespace, the pods whose state
// names one of the rollouts but that left the workload since: a label edited away from the
// selector, or a pod its controller released. The namespace is searched, as the lock names only
// the first pods touched; pods another controller owns are left to it. byName are the
// namespace's pods, for lostPods.
func (e *Engine) rollbackPods(ctx context.Context, w workload.Workload, ours []string) (pods []*corev1.Pod, byName map[string]*corev1.Pod, err error) {
	pods = w.Pods()
	seen := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		seen[p.UID] = true
	}
	ns := w.Ref().Namespace
	list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the pods of namespace %s for the rollback: %w", ns, err)
	}
	byName = make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		byName[p.Name] = p
		if seen[p.UID] || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if w.Ref().Kind != workload.Pods && metav1.GetControllerOf(p) != nil {
			continue
		}
		if s, err := inplace.ReadState(p); err == nil && s != nil && slices.Contains(ours, s.RolloutID) {
			pods = append(pods, p)
		}
	}
	return pods, byName, nil
}

// lostPods are the pods the lock names as touched that the rollback did not find by their state
// (found, by UID) and that still run an image the rollout put there: their state annotation was
// removed, names another rollout, or the pod went to another owner. Each is for a person, who
// puts its images back by hand; a touched pod deleted since (another may have its name now), or
// back on a before image, is not. note says how many pods touched beyond those the lock names
// were not found, as those cannot be named.
func lostPods(lock *workload.Lock, before map[string][]string, byName map[string]*corev1.Pod, found map[types.UID]bool) (lost []string, note string) {
	for _, t := range lock.Touched {
		p := byName[t.Name]
		if p == nil || p.UID != t.UID || found[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		img := rolloutImage(p, lock, before)
		if img == "" {
			continue
		}
		why := "its state annotation " + inplace.StateAnnotation + " is gone"
		if s, err := inplace.ReadState(p); err == nil && s != nil {
			why = "its state names rollout " + s.RolloutID
		}
		if owner := metav1.GetControllerOf(p); owner != nil {
			why += fmt.Sprintf(", and %s %s owns it", owner.Kind, owner.Name)
		}
		lost = append(lost, fmt.Sprintf("pod %s was updated by rollout %s and still runs %s, but %s; put its images back by hand (%s), then run rollback again",
			t.Name, lock.RolloutID, img, why, mustJSON(lock.PreviousImages)))
	}
	if lock.TouchedMore > 0 {
		unnamed := 0
		for uid := range found {
			if !slices.ContainsFunc(lock.Touched, func(t workload.TouchedPod) bool { return t.UID == uid }) {
				unnamed++
			}
		}
		if unnamed < lock.TouchedMore {
			note = fmt.Sprintf("; %d of the pods touched beyond the %d the lock names were not found by their state: look for pods still on %s",
				lock.TouchedMore-unnamed, len(lock.Touched), mustJSON(lock.Images))
		}
	}
	return lost, note
}

// rolloutImage is the first image the pod's spec runs, for a container of the rollout, that is
// not one of the before images: an image a rollout put there. It is "" when there is none.
func rolloutImage(p *corev1.Pod, lock *workload.Lock, before map[string][]string) string {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if _, ok := lock.Images[c.Name]; ok && !slices.ContainsFunc(before[c.Name], func(s string) bool { return inplace.SameImage(s, c.Image) }) {
				return c.Image
			}
		}
	}
	return ""
}

// lockBeforeImages are the images, by container, the lock records as run before the rollout:
// its BeforeImages and PreviousImages.
func lockBeforeImages(lock *workload.Lock) map[string][]string {
	out := make(map[string][]string, len(lock.PreviousImages))
	for name, imgs := range lock.BeforeImages {
		out[name] = slices.Clone(imgs)
	}
	for name, img := range lock.PreviousImages {
		if !slices.ContainsFunc(out[name], func(s string) bool { return inplace.SameImage(s, img) }) {
			out[name] = append(out[name], img)
		}
	}
	return out
}

// revertImages are the images a revert may put back, or nil to check none: a lock written
// before BeforeImages existed recorded one image per container, from the first pod for
// label-selected pods, which may have run others.
func revertImages(w workload.Workload, lock *workload.Lock, before map[string][]string) map[string][]string {
	if lock.BeforeImages == nil && w.Ref().Kind == workload.Pods {
		return nil
	}
	return before
}

// untouched reports whether a pod, judged without its state, is one the rollout did not change:
// its spec runs recorded before images, and it does not carry the new revision's labels.
func untouched(w workload.Workload, lock *workload.Lock, before map[string][]string, p *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if _, ok := lock.Images[c.Name]; ok && !slices.ContainsFunc(before[c.Name], func(s string) bool { return inplace.SameImage(s, c.Image) }) {
				return false
			}
		}
	}
	labels, ok, err := w.RevisionLabels(lock.Images)
	switch {
	case err != nil:
		return false // cannot tell: a person looks rather than the pod be passed over
	case !ok || len(labels) == 0:
		return true
	}
	for k, v := range labels {
		if p.Labels[k] != v {
			return true
		}
	}
	return false
}
