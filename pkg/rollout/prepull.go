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

// decidePrePull decides the pre-pull part of a step that steps, soaks or analyses: roll back on
// a failed pull, remove the pullers that are done or create the missing ones (actPull), and
// step only the pods whose node has their images, waiting (actWaitPull) while none has.
func decidePrePull(c *census, spec Spec, now time.Time, d *decision) {
	if !spec.PrePull || d.action != actStep && d.action != actSoak && d.action != actAnalyze {
		return
	}
	if len(c.target.Images) == 0 {
		// A rollout of resources alone pulls nothing.
		return
	}
	plan := decidePulls(c.pullers, upcoming(c, *d), now, spec.progressDeadline())
	switch {
	case plan.failed != "":
		d.rollBack(causePrePullFailed, "pre-pull failed, before any pod of the batch restarted: "+plan.failed)
		return
	case len(plan.remove) > 0 || len(plan.create) > 0:
		d.action, d.pulls = actPull, plan
		return
	case d.action != actStep:
		return
	}
	var work []*corev1.Pod
	for _, p := range d.work {
		// A pod on no node yet has no node to pull onto: its update waits, and its deadline
		// counts, as without pre-pull.
		if slices.Contains(c.inflight, p) || plan.pulled[p.Spec.NodeName] || p.Spec.NodeName == "" {
			work = append(work, p)
		} else {
			d.unpulled = append(d.unpulled, p.Name)
		}
	}
	d.work = work
	if len(work) == 0 && len(d.unpulled) > 0 {
		d.action = actWaitPull
	}
}

// pull takes the pre-pull work decided: it removes the pullers that are done, or creates the
// missing ones (one write each), and the step ends there.
func (e *Engine) pull(ctx context.Context, w workload.Workload, lock *Record, c *census, plan pullPlan, st Status) (Status, time.Duration, error) {
	ns := w.Ref().Namespace
	if len(plan.remove) > 0 {
		if _, err := prepull.Delete(ctx, e.Client, plan.remove); err != nil {
			return st, 0, err
		}
		st.Message = fmt.Sprintf("batch %d/%d: removed %d puller pods whose nodes have the new images", st.Batch, st.Batches, len(plan.remove))
		return st, busyRequeue, nil
	}
	if e.PullerImage == "" {
		return st, 0, invalid("%s: pre-pull needs the image holding the puller binary, and this driver has none; run without pre-pull", w.Ref())
	}
	if _, _, err := prepull.Ensure(ctx, e.Client, ns, lock.RolloutID, pullImages(lock.Images), plan.create, c.pullers, prepull.Options{HelperImage: e.PullerImage}); err != nil {
		return st, 0, err
	}
	nodes := slices.Sorted(maps.Keys(plan.create))
	e.logFor(w.Ref(), lock.RolloutID).Info("pulling the new images", "nodes", strings.Join(nodes, ","))
	st.Message = fmt.Sprintf("batch %d/%d: pulling the new images onto %s", st.Batch, st.Batches, strings.Join(firstN(nodes, 5), ", "))
	return st, busyRequeue, nil
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
