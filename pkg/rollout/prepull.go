package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// ReasonPrePullFailed: pulling a batch's new images onto its nodes failed, before any pod of the
// batch restarted.
const ReasonPrePullFailed Reason = "PrePullFailed"

// pullPlan is what pre-pull has to do in a step, decided from the puller pods and the pods that
// start next.
type pullPlan struct {
	// failed says why a puller failed; the rollout rolls back.
	failed string
	// create are the nodes that need a puller, with the pods that will restart there.
	create map[string][]*corev1.Pod
	// remove are pullers done: their images are on the node, and no pod there waits to start.
	remove []corev1.Pod
	// pulled are the nodes whose puller pulled the images.
	pulled map[string]bool
}

// decidePulls decides the pre-pull work of a step from the rollout's puller pods and the
// pods that start next (the rest of the batch in progress and the next batch), alone. A puller
// still pulling deadline after it was created failed: its node may be gone, and a kubelet that is
// gone enforces no activeDeadlineSeconds.
func decidePulls(pullers []corev1.Pod, next []*corev1.Pod, now time.Time, deadline time.Duration) pullPlan {
	plan := pullPlan{create: map[string][]*corev1.Pod{}, pulled: map[string]bool{}}
	waiting := map[string][]*corev1.Pod{}
	for _, p := range next {
		if p.Spec.NodeName != "" {
			waiting[p.Spec.NodeName] = append(waiting[p.Spec.NodeName], p)
		}
	}
	have := map[string]bool{}
	for _, pp := range pullers {
		node := pp.Spec.NodeName
		have[node] = true
		phase, why := prepull.Judge(&pp)
		if phase == prepull.Pulling && !pp.CreationTimestamp.IsZero() && now.Sub(pp.CreationTimestamp.Time) >= deadline {
			phase, why = prepull.Failed, fmt.Sprintf("puller pod %s on node %s pulled nothing within %s", pp.Name, node, deadline)
		}
		switch {
		case phase == prepull.Failed && plan.failed == "":
			plan.failed = why
		case phase == prepull.Pulled && pp.DeletionTimestamp == nil:
			plan.pulled[node] = true
			if len(waiting[node]) == 0 {
				plan.remove = append(plan.remove, pp)
			}
		}
	}
	for node, pods := range waiting {
		if !have[node] {
			plan.create[node] = pods
		}
	}
	return plan
}

// upcoming are the pending pods that start next, in order: the rest of the batch in progress
// and the whole batch after it, so that the next batch pulls while this one soaks or is analysed.
func upcoming(c *census, d decision) []*corev1.Pod {
	next := min(d.batch+1, len(d.counts)-1)
	// Never past the hold point: the rollout may stay there for long, or stop there.
	n := min(d.counts[next], d.upTo) - len(c.updated) - len(c.inflight) - len(c.arriving)
	return c.pending[:max(min(n, len(c.pending)), 0)]
}

// prePull takes the pre-pull part of a step: it rolls back on a failed pull, removes the pullers
// that are done, creates the missing ones (one write each, and the step ends there), and keeps
// in d.work only the pods whose node has their images. done says the step ended here.
func (e *Engine) prePull(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock, c *census, d *decision, st Status) (Status, Result, bool, error) {
	ns := w.Ref().Namespace
	pullers, err := prepull.List(ctx, e.Client, ns, lock.RolloutID)
	if err != nil {
		return st, Result{}, true, err
	}
	plan := decidePulls(pullers, upcoming(c, *d), e.now(), spec.progressDeadline())
	switch {
	case plan.failed != "":
		return e.beginRollbackDone(ctx, w, lock, ReasonPrePullFailed, "pre-pull failed, before any pod of the batch restarted: "+plan.failed, st)
	case len(plan.remove) > 0:
		if _, err := prepull.Delete(ctx, e.Client, plan.remove); err != nil {
			return st, Result{}, true, err
		}
		st.Message = fmt.Sprintf("batch %d/%d: removed %d puller pods whose nodes have the new images", st.Batch, st.Batches, len(plan.remove))
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, true, nil
	case len(plan.create) > 0:
		if e.PullerImage == "" {
			return st, Result{}, true, invalid("%s: pre-pull needs the image holding the puller binary, and this driver has none; run without pre-pull", w.Ref())
		}
		_, _, err := prepull.Ensure(ctx, e.Client, ns, lock.RolloutID, pullImages(lock.Images), plan.create, pullers, prepull.Options{HelperImage: e.PullerImage})
		if err != nil {
			return st, Result{}, true, err
		}
		nodes := slices.Sorted(maps.Keys(plan.create))
		e.logFor(w.Ref(), lock.RolloutID).Info("pulling the new images", "nodes", strings.Join(nodes, ","))
		st.Message = fmt.Sprintf("batch %d/%d: pulling the new images onto %s", st.Batch, st.Batches, strings.Join(firstN(nodes, 5), ", "))
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, true, nil
	}
	if d.action != actStep {
		return st, Result{}, false, nil
	}
	var work []*corev1.Pod
	var waiting []string
	for _, p := range d.work {
		// A pod on no node yet has no node to pull onto: its update waits, and its deadline
		// counts, as without pre-pull.
		if slices.Contains(c.inflight, p) || plan.pulled[p.Spec.NodeName] || p.Spec.NodeName == "" {
			work = append(work, p)
		} else {
			waiting = append(waiting, p.Name)
		}
	}
	d.work = work
	if len(work) == 0 && len(waiting) > 0 {
		st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; waiting for the new images on the nodes of %s", st.Batch, st.Batches, st.Updated, st.Total, strings.Join(firstN(waiting, 3), ", "))
		return st, Result{Phase: PhaseProgressing, RequeueAfter: idleRequeue, Message: st.Message}, true, nil
	}
	return st, Result{}, false, nil
}

// beginRollbackDone is beginRollback as the end of a step.
func (e *Engine) beginRollbackDone(ctx context.Context, w workload.Workload, lock *workload.Lock, code Reason, reason string, st Status) (Status, Result, bool, error) {
	st, res, err := e.beginRollback(ctx, w, lock, code, reason, st)
	return st, res, true, err
}

// pullImages are the images a puller pulls: the rollout's, in container order.
func pullImages(images map[string]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(images)) {
		out = append(out, images[name])
	}
	return out
}

// removePullers deletes the puller pods of the rollouts named, and says whether it deleted any.
func (e *Engine) removePullers(ctx context.Context, ns string, rolloutIDs []string) (bool, error) {
	n, err := prepull.Remove(ctx, e.Client, ns, rolloutIDs...)
	return n > 0, err
}
