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
// up to max-unavailable, and finalizes the workload once every pod is updated.
func (e *Engine) progress(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	total := w.Replicas()
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseProgressing, Total: total}
	labels, ok, err := w.RevisionLabels(lock.Images)
	if err != nil {
		return st, Result{}, err
	}
	if !ok {
		// The controller (or the API server) is behind; the rollout waits for it rather than
		// judge the pods against a revision that does not exist yet.
		st.Message = "waiting for the workload controller to record the new revision"
		if tmpl := w.Template(); tmpl != nil && !workload.TemplateHasImages(tmpl, lock.Images) {
			st.Message = fmt.Sprintf("the template of %s no longer has the rollout's images %s: someone changed it; put them back, or run `inplace-rollout rollback`",
				w.Ref(), mustJSON(lock.Images))
		}
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
	}
	target := inplace.Target{Images: lock.Images, IncludeInit: spec.IncludeInit, RolloutID: lock.RolloutID, Labels: labels, Supersedes: lock.Superseded}

	var inflight, pending []*corev1.Pod
	var failed, updated []string
	var ours []*inplace.State
	var soaking []podState // pods this rollout updated, watched through the batch's soak
	var deleting []string
	for _, p := range w.Pods() {
		if p.DeletionTimestamp != nil {
			deleting = append(deleting, p.Name) // the controller recreates it; the new pod is judged then
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
		case s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageFailed:
			failed = append(failed, fmt.Sprintf("pod %s: %s", p.Name, s.Reason))
		case s != nil && s.RolloutID == lock.RolloutID:
			inflight = append(inflight, p)
		case s != nil && !s.Stage.Terminal() && slices.Contains(lock.Superseded, s.RolloutID):
			// A superseded update still on this pod: one already patched finishes before the
			// new one starts; one that never got to the images is taken over or cleared (a
			// drained pod gets its readiness gate back).
			inflight = append(inflight, p)
		case w.Counted(p, lock.Images, labels):
			updated = append(updated, p.Name)
		default:
			pending = append(pending, p)
		}
	}
	st.Updated = len(updated)
	if len(failed) > 0 {
		return e.beginRollback(ctx, w, lock, strings.Join(firstN(failed, 3), "; "), st)
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
	if i := slices.Index(batches, st.Updated); i >= 0 && spec.Soak > 0 && len(inflight) == 0 && len(soaking) > 0 {
		// The batch is complete since its last pod was Updated.
		var done time.Time
		for _, ps := range soaking {
			done = latest(done, ps.state.StageAt)
		}
		if left := done.Add(spec.Soak).Sub(e.now()); left > 0 {
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

	if st.Updated >= total && len(inflight) == 0 && len(pending) == 0 && (spec.Analysis == nil || lock.AnalyzedBatches >= len(batches)) {
		done, err := w.Finalize(ctx, lock)
		if err != nil {
			return st, Result{}, err
		}
		if !done {
			st.Message = "finalizing " + w.Ref().String()
			return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
		}
		st.Phase, st.Message = PhaseSucceeded, fmt.Sprintf("%d/%d pods updated in place; %s handed back with the new images", st.Updated, total, w.Ref())
		e.log().Info("rollout succeeded", "target", w.Ref().String(), "rollout", lock.RolloutID, "updated", st.Updated)
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
		end = max(end, st.Updated+len(inflight)+len(pending))
	}
	start := min(len(pending), maxUnavailable-len(inflight), end-st.Updated-len(inflight))
	work := append(slices.Clone(inflight), pending[:max(start, 0)]...)
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
	// not start (unscheduled, not Running, no imageID) for as long.
	if wrote == 0 && len(inflight) == 0 && len(pending) > 0 && e.now().Sub(latest(lastProgress(lock, ours, spec.Soak), lastChange(pending))) >= spec.progressDeadline() {
		return e.beginRollback(ctx, w, lock, fmt.Sprintf("ProgressDeadlineExceeded: batch %d/%d made no progress within %s: %s",
			st.Batch, st.Batches, spec.progressDeadline(), whyWaiting(pending, target)), st)
	}
	started := len(work) - len(inflight)
	st.Updating = len(inflight) + started
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated, %d updating", st.Batch, st.Batches, st.Updated, total, st.Updating)
	if st.Updating == 0 && len(deleting) > 0 {
		st.Message += fmt.Sprintf("; waiting for the controller to replace %s, being deleted", strings.Join(firstN(deleting, 3), ", "))
	}
	return st, Result{Phase: PhaseProgressing, RequeueAfter: requeue, Message: st.Message}, nil
}

// soak waits out the soak of a complete batch, failing the rollout if one of the pods it
// updated crashes or restarts meanwhile.
func (e *Engine) soak(ctx context.Context, w workload.Workload, lock *workload.Lock, pods []podState, left time.Duration, st Status) (Status, Result, error) {
	for _, ps := range pods {
		if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
			return e.beginRollback(ctx, w, lock, fmt.Sprintf("pod %s failed during the soak of batch %d: %s", ps.pod.Name, st.Batch, why), st)
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

// whyWaiting says why the first of the pods cannot start, and how many wait.
func whyWaiting(pending []*corev1.Pod, target inplace.Target) string {
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
		return e.beginRollback(ctx, w, lock, err.Error(), st)
	}
	return st, Result{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
}
