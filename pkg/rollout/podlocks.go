package rollout

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// collectPodLocks deletes, once a rollout of label-selected pods starts or ends, the lock
// ConfigMaps of other pod selectors in its namespace that no longer record anything to act on
// (podLockObsolete). Label-selected pods have no workload object to carry their lock, so without
// this every selector ever rolled out would leave a ConfigMap behind.
//
// It is housekeeping: a failure leaves a ConfigMap for the next rollout to remove, and never
// fails the rollout that called it. Each delete carries the resourceVersion it judged, so a
// lock that changed meanwhile is left alone.
func (e *Engine) collectPodLocks(ctx context.Context, ref Ref) {
	if ref.Kind != workload.Pods {
		return
	}
	locks, err := workload.ListPodLocks(ctx, e.Client, ref.Namespace)
	if err != nil {
		return
	}
	keep := workload.PodLockName(ref.Selector)
	var live map[string]bool // rollout IDs some live pod's state carries, read once when needed
	for _, l := range locks {
		if l.Name == keep || l.Lock == nil {
			continue // a lock that cannot be read is not ours to judge: a person may be repairing it
		}
		r, err := recordOf(Ref{Kind: workload.Pods, Namespace: ref.Namespace}, l.Lock)
		if err != nil || r == nil {
			continue
		}
		if r.Phase == PhaseSucceeded || r.Phase == PhaseReleased {
			if live == nil {
				if live = e.podRollouts(ctx, ref.Namespace); live == nil {
					return
				}
			}
		}
		if podLockObsolete(r, live) {
			_ = workload.DeletePodLock(ctx, e.Client, ref.Namespace, l)
		}
	}
}

// podLockObsolete reports whether the record r of another pod selector's lock records nothing
// to act on: its rollout rolled back, or it succeeded (or was released) but none of the pods it
// updated carries its state any more (live: the rollout IDs the namespace's pods carry), so
// `rollback` could not find them. A lock still in flight stays.
func podLockObsolete(r *Record, live map[string]bool) bool {
	switch r.Phase {
	case PhaseRolledBack:
		return true
	case PhaseSucceeded, PhaseReleased:
		return !slices.ContainsFunc(r.Rollouts(), func(id string) bool { return live[id] })
	}
	return false
}

// podRollouts returns the rollout IDs the states of the namespace's pods carry, or nil when the
// pods cannot be listed or a state cannot be read (it may be any rollout's: keep every lock).
func (e *Engine) podRollouts(ctx context.Context, ns string) map[string]bool {
	list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	ids := map[string]bool{}
	for i := range list.Items {
		st, err := inplace.ReadState(&list.Items[i])
		if err != nil {
			return nil
		}
		if st != nil {
			ids[st.RolloutID] = true
		}
	}
	return ids
}
