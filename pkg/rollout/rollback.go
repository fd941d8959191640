package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
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
func (e *Engine) Abort(ctx context.Context, r RollbackSpec, prev Status) (Status, time.Duration, error) {
	st, res, err := e.abort(ctx, r, prev)
	return st, res, classify(err, st)
}

func (e *Engine) abort(ctx context.Context, r RollbackSpec, prev Status) (Status, time.Duration, error) {
	if err := r.Validate(); err != nil {
		return prev, 0, err
	}
	w, lock, err := e.load(ctx, r.Target)
	if err != nil {
		return prev, 0, err
	}
	return e.reconcileRollback(ctx, r, w, lock)
}

// beginRollback writes lock (with any other change it carries) marked rolling back, and why.
func (e *Engine) beginRollback(ctx context.Context, w workload.Workload, lock *Record, code Reason, reason string, st Status) (Status, time.Duration, error) {
	next := *lock
	next.Phase, next.Message, next.Reason = PhaseRollingBack, reason, code
	if err := w.SetLock(ctx, next.encode()); err != nil {
		// The rollout failed and its rollback could not begin: as incomplete as a rollback gets.
		st.Phase, st.Message = PhaseRollingBack, "rolling back: "+reason
		return st, 0, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Warn("rolling back", "reason", code, "message", reason)
	e.recordOn(ctx, w, lock.RolloutID, milestone(corev1.EventTypeWarning, EventRolloutRollingBack, lock.RolloutID, "rolling back (%s): %s", code, reason))
	st.Phase, st.Reason, st.Message = PhaseRollingBack, code, "rolling back: "+reason
	return st, 0, nil
}

// reconcileRollback handles an explicit rollback request: of the rollout in flight, or of the
// last finished one.
func (e *Engine) reconcileRollback(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *Record) (Status, time.Duration, error) {
	switch {
	case lock == nil:
		return Status{}, 0, invalid("%s has no in-place rollout recorded; nothing to roll back", w.Ref())
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && !spec.TakeOver:
		return Status{}, 0, holderRefusal(w, lock, spec.Holder, "roll it back")
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && lock.Phase != PhaseRolledBack:
		return e.takeOver(ctx, w, lock, spec.Holder, spec.HolderUID)
	case lock.Phase == PhaseRolledBack:
		return e.finished(w, lock, PhaseRolledBack, fmt.Sprintf("rollout %s is rolled back", lock.RolloutID))
	case lock.Phase == PhaseRollingBack:
		return e.rollBack(ctx, spec, w, lock)
	case lock.Phase == PhaseProgressing, lock.Phase == PhasePaused, lock.Phase == PhaseHalted, lock.Phase == PhaseHolding:
		return e.beginRollback(ctx, w, lock, ReasonRollbackRequested, rollbackRequested(lock, spec), Status{RolloutID: lock.RolloutID, Total: w.Replicas()})
	}
	// Succeeded: freeze the workload again, then revert the pods as for a failed rollout; a
	// rollout to the owner's template writes the lock alone, as it did (load wraps only a lock
	// in flight).
	if lock.TemplateOwned {
		ow, err := workload.Owned(w)
		if err != nil {
			return Status{}, 0, err
		}
		w = ow
	}
	next := *lock
	next.Phase, next.Message, next.Reason = PhaseRollingBack, "rollback requested", ReasonRollbackRequested
	if err := w.Start(ctx, next.encode(), next.target()); err != nil {
		return Status{}, 0, err
	}
	e.collectPodLocks(ctx, w.Ref())
	e.logFor(w.Ref(), lock.RolloutID).Info("rolling back a finished rollout")
	e.recordOn(ctx, w, lock.RolloutID, milestone(corev1.EventTypeWarning, EventRolloutRollingBack, lock.RolloutID,
		"rolling back (%s): asked after the rollout succeeded", ReasonRollbackRequested))
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Message: "rolling back"}
	return st, 0, nil
}

// rollBack reverts every pod the rollout (and the rollouts it superseded) touched, most recent
// first, then restores the workload's previous images and strategy: it observes the pods
// (observeRollback), decides the next step (decideRollback) and takes it.
func (e *Engine) rollBack(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *Record) (Status, time.Duration, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Reason: Reason(lock.Reason)}
	pods, byName, err := e.rollbackPods(ctx, w, lock.Rollouts())
	if err != nil {
		return st, 0, err
	}
	c, err := observeRollback(w, lock, pods, byName, e.now())
	if err != nil {
		return st, 0, err
	}
	d, err := decideRollback(c, spec, lock, e.now())
	if err != nil {
		return st, 0, err
	}
	st.RolledBack = d.rolledBack
	switch d.action {
	case rbAdopt:
		return e.adoptStrays(ctx, spec, w, lock, c, d, st)
	case rbRetry, rbRevert:
		return e.revertPods(ctx, spec, w, lock, c, d, st)
	case rbRemovePullers:
		return e.removeRollbackPullers(ctx, c, d, st)
	case rbNeedsPerson:
		return needsPerson(d, st)
	}
	return e.restoreWorkload(ctx, spec, w, lock, d, st)
}

// rollbackCensus is what a rollback observes of the pods, each sorted by where it stands in the
// rollback. It decides nothing.
type rollbackCensus struct {
	ref   workload.Ref
	total int
	// pods are the pods observed, whose pull credentials a revert asks the registry with.
	pods []*corev1.Pod
	// rolledBack counts the pods whose revert finished.
	rolledBack int
	// todo are the reverts to start or to take on, in update order; failed the reverts that
	// failed, looked at again on every step.
	todo, failed []podState
	// strays are pods the controller created from the new template while the rollout held the
	// workload.
	strays []*corev1.Pod
	// stuck say why each of the pods a person must look at is one: a state that cannot be read,
	// or that names an image the rollout did not record.
	stuck []string
	// lost and touchedNote are what lostPods says of the pods the lock names.
	lost        []string
	touchedNote string
	// skipped name the pods left alone: their state cannot be read, and the rollout did not
	// touch them.
	skipped []string
	// pullers are the rollouts' puller pods not yet being deleted.
	pullers []corev1.Pod
	// adoption is what a stray is recorded as updated from: the previous images, and the
	// imageIDs and labels the rollout's pods had before.
	adoption inplace.Adoption
	// foreign are the images and resources someone else put in the template during the
	// rollout, or nil.
	foreign *workload.Change
	// revertImages are the images a revert may put back (see revertImages).
	revertImages map[string][]string
}

// observeRollback sorts the pods rollbackPods found, and the namespace's pods (byName), by where
// they stand in the rollback of lock.
func observeRollback(w workload.Observed, lock *Record, pods []*corev1.Pod, byName map[string]*corev1.Pod, now time.Time) (*rollbackCensus, error) {
	ours := lock.Rollouts()
	before := lockBeforeImages(lock)
	c := &rollbackCensus{ref: w.Ref(), total: w.Replicas(), pods: pods, foreign: workload.Foreign(w, lock.target()),
		revertImages: revertImages(w, lock, before),
		adoption: inplace.Adoption{RolloutID: lock.RolloutID, Images: lock.PreviousImages, Resources: lock.PreviousResources,
			ImageIDs: map[string]string{}, Labels: map[string]string{}}}
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
			c.skipped = append(c.skipped, p.Name)
			continue
		case errors.As(err, &unreadable):
			found[p.UID] = true
			c.stuck = append(c.stuck, fmt.Sprintf("%v; restore it or remove it and put the pod's images back by hand, then run rollback again", err))
			continue
		case err != nil:
			return nil, err
		}
		if s == nil || !slices.Contains(ours, s.RolloutID) {
			if stray(w.Ref().Kind, lock, p, s, now) {
				c.strays = append(c.strays, p)
				found[p.UID] = true
			}
			continue
		}
		found[p.UID] = true
		c.add(lock, podState{p, s})
	}
	c.lost, c.touchedNote = lostPods(lock, before, byName, found)
	c.pullers = pullersOf(byName, ours)
	return c, nil
}

// add sorts a pod that carries a state of the rollout, and records what it ran before for the
// adoption of strays.
func (c *rollbackCensus) add(lock *Record, ps podState) {
	for _, ct := range ps.state.Containers {
		if ct.BeforeImage == lock.PreviousImages[ct.Name] && ct.BeforeImageID != "" {
			c.adoption.ImageIDs[ct.Name] = ct.BeforeImageID
		}
	}
	for k, l := range ps.state.Labels {
		c.adoption.Labels[k] = l.Before
	}
	switch {
	case ps.state.Stage == inplace.StageRolledBack:
		c.rolledBack++
	case ps.state.RevertFailed():
		c.failed = append(c.failed, ps)
	default:
		// A state edited to name another image is not followed: the pod stays for a person.
		if err := inplace.CheckRevert(ps.pod, ps.state, c.revertImages); err != nil {
			c.stuck = append(c.stuck, err.Error())
			return
		}
		c.todo = append(c.todo, ps)
	}
}

// stray reports whether a pod with no state of the rollout (s names another rollout, or is nil)
// was created by the workload's controller from the new template while the rollout held it: it
// has the rollout's images and resources and not the previous ones. One that does not run (unscheduled,
// pending) is left to the controller once the template is restored: a revert could never
// complete on it. Another rollout's state counts once that update is over (inplace.Over).
func stray(kind workload.Kind, lock *Record, p *corev1.Pod, s *inplace.State, now time.Time) bool {
	return kind != workload.Pods && (s == nil || inplace.Over(p, s, now)) && p.Status.Phase == corev1.PodRunning &&
		workload.Runs(p, lock.target()) && !workload.Runs(p, lock.previous())
}

// pullersOf are the puller pods of the rollouts named among the namespace's pods, by name, but
// those already being deleted.
func pullersOf(byName map[string]*corev1.Pod, rolloutIDs []string) []corev1.Pod {
	var out []corev1.Pod
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p := byName[name]
		if id, ok := p.Labels[prepull.LabelRollout]; ok && slices.Contains(rolloutIDs, id) && p.DeletionTimestamp == nil {
			out = append(out, *p)
		}
	}
	return out
}

// rollbackAction is the next step of a rollback.
type rollbackAction int

const (
	// rbRevert reverts the next pods, at most max-unavailable at once.
	rbRevert rollbackAction = iota
	// rbAdopt records the strays as updated, so that they go back with the rest.
	rbAdopt
	// rbRetry records as rolled back the failed reverts whose pods got back since.
	rbRetry
	rbRemovePullers
	// rbNeedsPerson ends the rollback incomplete: only a person can put the pods it names back.
	rbNeedsPerson
	// rbRestore hands the workload back with its previous images and strategy.
	rbRestore
)

// rollbackDecision is what decideRollback chose, with what the step needs.
type rollbackDecision struct {
	action rollbackAction
	// work are the pods to adopt (rbAdopt), to record rolled back (rbRetry) or to revert
	// (rbRevert), in that order.
	work []*corev1.Pod
	// rolledBack counts the pods rolled back, those of rbRetry among them; updating the pods
	// reverted at once.
	rolledBack, updating int
	// message is the step's status message; for rbRestore, once the workload is restored.
	message string
}

// decideRollback decides the next step of a rollback from what observeRollback saw, alone, in
// this order: strays are adopted first, so that they go back with the rest; a failed revert
// whose pod got back since is recorded rolled back; then the pods to revert go back, most
// recently started first; once none is left, puller pods are removed, and the rollback ends
// for a person when a pod is stuck, or with the workload restored.
func decideRollback(c *rollbackCensus, spec RollbackSpec, lock *Record, now time.Time) (rollbackDecision, error) {
	d := rollbackDecision{rolledBack: c.rolledBack}
	if len(c.strays) > 0 {
		d.action, d.work = rbAdopt, c.strays
		d.message = fmt.Sprintf("rolling back: %d pods created from the new template meanwhile go back too", len(c.strays))
		return d, nil
	}
	stuck := append(slices.Clone(c.stuck), c.lost...)
	notes := rollbackNotes(c, stuck)
	// A failed revert is looked at again: the pod may have got back since (a slow pull
	// finished, a person fixed the cause), and then the rollback goes on.
	opts := inplace.Options{GracePeriod: spec.GracePeriod, ProgressDeadline: spec.Timeout, RevertImages: c.revertImages}
	for _, ps := range c.failed {
		if revertRecovered(ps.pod, opts, now) {
			d.work = append(d.work, ps.pod)
			continue
		}
		stuck = append(stuck, fmt.Sprintf("pod %s: %s", ps.pod.Name, ps.state.Reason))
	}
	todo := revertOrder(c.todo)
	if len(d.work) > 0 {
		d.action, d.rolledBack = rbRetry, d.rolledBack+len(d.work)
		d.message = fmt.Sprintf("rolling back: %d pods reverted, %d to go: %s%s", d.rolledBack, len(todo), lock.Message, notes)
		return d, nil
	}
	if len(todo) > 0 {
		maxUnavailable, err := resolveMaxUnavailable(spec.MaxUnavailable, c.total)
		if err != nil {
			return d, err
		}
		d.action, d.updating = rbRevert, min(len(todo), maxUnavailable)
		for _, t := range todo[:d.updating] {
			d.work = append(d.work, t.pod)
		}
		d.message = fmt.Sprintf("rolling back: %d pods reverted, %d to go: %s%s", d.rolledBack, len(todo), lock.Message, notes)
		return d, nil
	}
	switch {
	case len(c.pullers) > 0:
		// Puller pods never outlive the rollout, even one whose rollback a person must finish.
		d.action, d.message = rbRemovePullers, "rolling back: removing the puller pods"
	case len(stuck) > 0:
		d.action, d.message = rbNeedsPerson, "rollback incomplete, a person must look: "+strings.Join(firstN(stuck, 5), "; ")+notes
	default:
		d.action, d.message = rbRestore, rolledBackMessage(c, spec, lock, d.rolledBack)+notes
	}
	return d, nil
}

// rollbackNotes are what a rollback's messages add: the pods touched beyond those the lock
// names that were not found, the pods skipped and, while pods are still to revert, the pods
// stuck already.
func rollbackNotes(c *rollbackCensus, stuck []string) string {
	notes := c.touchedNote
	if len(c.skipped) > 0 {
		notes += fmt.Sprintf("; skipped %s: state annotation %s unreadable, and not touched by the rollout (it runs the previous images)",
			strings.Join(firstN(c.skipped, 5), ", "), inplace.StateAnnotation)
	}
	if len(stuck) > 0 && len(c.todo) > 0 {
		notes += fmt.Sprintf("; %d pods need a person: %s", len(stuck), strings.Join(firstN(stuck, 3), "; "))
	}
	return notes
}

// revertRecovered reports whether the pod of a failed revert got back to its before images
// since: the revert would now record it RolledBack.
func revertRecovered(p *corev1.Pod, opts inplace.Options, now time.Time) bool {
	step, err := inplace.NextRevert(p, opts, now, nil)
	return err == nil && step.Patch != nil && step.Stage == inplace.StageRolledBack
}

// revertOrder is the order pods are reverted in: those already rolling back first, then the
// most recently started first, the reverse of the order the batches went in. Pods come in
// update order, so reversing them first also reverses pods that started at the same instant.
func revertOrder(todo []podState) []podState {
	out := slices.Clone(todo)
	slices.Reverse(out)
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := out[i].state.Stage == inplace.StageRollingBack, out[j].state.Stage == inplace.StageRollingBack
		if ri != rj {
			return ri
		}
		return out[i].state.StartedAt.After(out[j].state.StartedAt)
	})
	return out
}

// rolledBackMessage is the message of a rollback that ends with the workload restored: a
// template someone else changed during the rollout keeps their images unless the rollback
// restores the template.
func rolledBackMessage(c *rollbackCensus, spec RollbackSpec, lock *Record, rolledBack int) string {
	if lock.TemplateOwned {
		return fmt.Sprintf("rolled back %d pods; %s keeps its template, which its owner wrote: %s", rolledBack, c.ref, lock.Message)
	}
	previous := describeChange(lock.previous())
	if c.foreign != nil && !spec.RestoreTemplate {
		return fmt.Sprintf("rolled back %d pods to %s; the template keeps %s, set by someone else during the rollout, and %s has its update strategy back, which now applies that template its own way (a rollback that restores the template would have put %s back in it instead): %s",
			rolledBack, previous, describeChange(*c.foreign), c.ref, previous, lock.Message)
	}
	return fmt.Sprintf("rolled back %d pods; %s restored to its previous %s (%s): %s", rolledBack, c.ref, changed(lock), previous, lock.Message)
}

// adoptStrays records the strays as updated from the previous images, so that they go back with
// the rest.
func (e *Engine) adoptStrays(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *Record, c *rollbackCensus, d rollbackDecision, st Status) (Status, time.Duration, error) {
	u := e.updater(spec.GracePeriod, spec.Timeout, e.logFor(w.Ref(), lock.RolloutID))
	requeue, _, failedPod, err := stepPods(d.work, func(p *corev1.Pod) (inplace.Result, error) { return u.AdoptPod(ctx, p, c.adoption) })
	if err != nil {
		return st, 0, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
	}
	st.Message = d.message
	return st, requeue, nil
}

// revertPods takes the next revert step on each pod of the decision: a failed revert whose pod
// got back is recorded rolled back, another pod goes on with its revert.
func (e *Engine) revertPods(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *Record, c *rollbackCensus, d rollbackDecision, st Status) (Status, time.Duration, error) {
	u := e.updater(spec.GracePeriod, spec.Timeout, e.logFor(w.Ref(), lock.RolloutID))
	u.Options.RevertImages = c.revertImages
	u.TagMoved = e.tagMoved(ctx, c.ref.Namespace, c.pods)
	requeue, _, failedPod, err := stepPods(d.work, func(p *corev1.Pod) (inplace.Result, error) { return u.RevertPod(ctx, p) })
	if err != nil {
		return st, 0, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
	}
	st.Updating, st.Message = d.updating, d.message
	return st, requeue, nil
}

// removeRollbackPullers deletes the puller pods the rollouts left.
func (e *Engine) removeRollbackPullers(ctx context.Context, c *rollbackCensus, d rollbackDecision, st Status) (Status, time.Duration, error) {
	_, err := prepull.Delete(ctx, e.Client, c.pullers)
	st.Message = d.message
	return st, busyRequeue, err
}

// needsPerson ends a rollback that only a person can finish. It writes nothing: the workload
// stays held, and a rollback run again goes on from there.
func needsPerson(d rollbackDecision, st Status) (Status, time.Duration, error) {
	st.Phase, st.Message = PhaseFailed, d.message
	return st, 0, nil
}

// restoreWorkload takes the next step of handing the workload back with its previous images and
// strategy.
func (e *Engine) restoreWorkload(ctx context.Context, spec RollbackSpec, w workload.Workload, lock *Record, d rollbackDecision, st Status) (Status, time.Duration, error) {
	final := *lock
	final.Phase = PhaseRolledBack
	done, err := w.Restore(ctx, final.encode(), lock.target(), spec.RestoreTemplate)
	if err != nil {
		return st, 0, err
	}
	if !done {
		st.Message = "restoring " + w.Ref().String()
		return st, busyRequeue, nil
	}
	e.collectPodLocks(ctx, w.Ref())
	st.Phase, st.Message = PhaseRolledBack, d.message
	e.outcome(ctx, w, lock.RolloutID, milestone(corev1.EventTypeWarning, EventRolloutRolledBack, lock.RolloutID, "ended: %s", d.message), NotifyRolledBack, st)
	e.rolledBack(w.Ref())
	e.logFor(w.Ref(), lock.RolloutID).Info("rolled back", "pods", st.RolledBack)
	return st, 0, nil
}

// rollbackRequested is the reason a requested rollback records; a halted rollout keeps what
// halted it.
func rollbackRequested(lock *Record, spec RollbackSpec) string {
	if lock.Phase != PhaseHalted {
		return "rollback requested"
	}
	what := "the other person's template stays"
	if spec.RestoreTemplate {
		what = "the template goes back to " + describeChange(lock.previous())
	}
	return fmt.Sprintf("rollback requested after %s; %s", lock.Message, what)
}

// rollbackPods are the workload's pods and, from the rest of the namespace, the pods whose state
// names one of the rollouts but that left the workload since: a label edited away from the
// selector, or a pod its controller released. The namespace is searched, as the lock names only
// the first pods touched; pods another controller owns are left to it. byName are the
// namespace's pods, for lostPods.
func (e *Engine) rollbackPods(ctx context.Context, w workload.Workload, ours []string) (pods []*corev1.Pod, byName map[string]*corev1.Pod, err error) {
	// A clone: the pods found below are appended, never into the workload's own slice.
	pods = slices.Clone(w.Pods())
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
// (found, by UID) and that still run an image, or have resources, the rollout put there: their
// state annotation was
// removed, names another rollout, or the pod went to another owner. Each is for a person, who
// puts its images back by hand; a touched pod deleted since (another may have its name now), or
// back on a before image, is not. note says how many pods touched beyond those the lock names
// were not found, as those cannot be named.
func lostPods(lock *Record, before map[string][]string, byName map[string]*corev1.Pod, found map[types.UID]bool) (lost []string, note string) {
	for _, t := range lock.Touched {
		p := byName[t.Name]
		if p == nil || p.UID != t.UID || found[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		img := rolloutImage(p, lock, before)
		if img == "" {
			img = rolloutResources(p, lock)
		}
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
		what := "images"
		if len(lock.Resources) > 0 {
			what = "images and resources"
		}
		lost = append(lost, fmt.Sprintf("pod %s was updated by rollout %s and still runs %s, but %s; put its %s back by hand (%s), then run rollback again",
			t.Name, lock.RolloutID, img, why, what, describeChange(lock.previous())))
	}
	if lock.TouchedMore > 0 {
		unnamed := 0
		for uid := range found {
			if !slices.ContainsFunc(lock.Touched, func(t TouchedPod) bool { return t.UID == uid }) {
				unnamed++
			}
		}
		if unnamed < lock.TouchedMore {
			note = fmt.Sprintf("; %d of the pods set out to update beyond the %d the lock names were not found by their state (a pod never written has none): look for pods still on %s",
				lock.TouchedMore-unnamed, len(lock.Touched), describeChange(lock.target()))
		}
	}
	return lost, note
}

// rolloutImage is the first image the pod's spec runs, for a container of the rollout, that is
// not one of the before images: an image a rollout put there. It is "" when there is none.
func rolloutImage(p *corev1.Pod, lock *Record, before map[string][]string) string {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if _, ok := lock.Images[c.Name]; ok && !slices.ContainsFunc(before[c.Name], func(s string) bool { return inplace.SameImage(s, c.Image) }) {
				return c.Image
			}
		}
	}
	return ""
}

// rolloutResources says, of the rollout's containers, the first whose spec has the resources
// the rollout sets and not the previous ones: resources a rollout put there. It is "" when there
// is none.
func rolloutResources(p *corev1.Pod, lock *Record) string {
	for _, name := range slices.Sorted(maps.Keys(lock.Resources)) {
		target := workload.Change{Resources: map[string]inplace.Resources{name: lock.Resources[name]}}
		previous := workload.Change{Resources: map[string]inplace.Resources{}}
		if r, ok := lock.PreviousResources[name]; ok {
			previous.Resources[name] = r
		}
		if workload.Runs(p, target) && (len(previous.Resources) == 0 || !workload.Runs(p, previous)) && runsContainer(p, name) {
			return fmt.Sprintf("container %s with resources %s", name, inplace.DescribeResources(lock.Resources[name]))
		}
	}
	return ""
}

// runsContainer reports whether the pod's spec has a container (or an init container) name.
func runsContainer(p *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// lockBeforeImages are the images, by container, the lock records as run before the rollout:
// its BeforeImages and PreviousImages.
func lockBeforeImages(lock *Record) map[string][]string {
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
func revertImages(w workload.Observed, lock *Record, before map[string][]string) map[string][]string {
	if lock.BeforeImages == nil && w.Ref().Kind == workload.Pods {
		return nil
	}
	return before
}

// untouched reports whether a pod, judged without its state, is one the rollout did not change:
// its spec runs recorded before images, has no target resources instead of the previous ones,
// and it does not carry the new revision's labels.
func untouched(w workload.Observed, lock *Record, before map[string][]string, p *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if _, ok := lock.Images[c.Name]; ok && !slices.ContainsFunc(before[c.Name], func(s string) bool { return inplace.SameImage(s, c.Image) }) {
				return false
			}
		}
	}
	if len(lock.Resources) > 0 && workload.Runs(p, workload.Change{Resources: lock.Resources}) &&
		!workload.Runs(p, workload.Change{Resources: lock.PreviousResources}) {
		return false
	}
	labels, ok, err := w.RevisionLabels(lock.target())
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
