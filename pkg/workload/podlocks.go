package workload

import (
	"context"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// lockConfigMapPrefix starts the name of every ConfigMap holding the lock of a pod selector.
const lockConfigMapPrefix = "inplace-rollout-pods-"

// collectPodLocks deletes the lock ConfigMaps of other pod selectors in the namespace that no
// longer record anything to act on: a rollout rolled back, or one that succeeded (or was
// released) but whose pods have all since been taken by another rollout (or are gone), so
// `rollback` could not find them. The lock named keep, and every lock still in flight or still
// the last record of some pod, stay.
//
// It is housekeeping: a failure leaves a ConfigMap for the next rollout to remove, and never
// fails the rollout that called it. Each delete carries the resourceVersion it judged, so a
// lock that changed meanwhile is left alone.
func collectPodLocks(ctx context.Context, client kubernetes.Interface, ns, keep string) {
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	var pods map[string]bool // rollout IDs some live pod's state carries, read once when needed
	for i := range cms.Items {
		cm := &cms.Items[i]
		if cm.Name == keep || !strings.HasPrefix(cm.Name, lockConfigMapPrefix) {
			continue
		}
		lock, err := parseLock(Pods, cm.Namespace, cm.Name, cm.Annotations)
		if err != nil || lock == nil {
			continue // not ours to judge: a person may be repairing it
		}
		switch lock.Phase {
		case LockRolledBack:
		case LockSucceeded, LockReleased:
			if pods == nil {
				if pods = podRollouts(ctx, client, ns); pods == nil {
					return
				}
			}
			if pods[lock.RolloutID] || slices.ContainsFunc(lock.Superseded, func(id string) bool { return pods[id] }) {
				continue
			}
		default:
			continue
		}
		rv := cm.ResourceVersion
		_ = client.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	}
}

// podRollouts returns the rollout IDs the states of the namespace's pods carry, or nil when the
// pods cannot be listed.
func podRollouts(ctx context.Context, client kubernetes.Interface, ns string) map[string]bool {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	ids := map[string]bool{}
	for i := range list.Items {
		if st, err := inplace.ReadState(&list.Items[i]); err == nil && st != nil {
			ids[st.RolloutID] = true
		} else if err != nil {
			// An unreadable state may be any rollout's: keep every lock.
			return nil
		}
	}
	return ids
}
