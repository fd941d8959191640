package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// The Events the engine records on the workload: one when a batch starts and one when the
// rollout ends, where its pods' progress would otherwise be two Events per pod. A pod still has
// its own Events when its update fails and when a rollback puts it back. Label-selected pods
// have no object to carry them: their rollout records only the pods' own.
const (
	EventBatchUpdating     = "InPlaceBatchUpdating"
	EventRolloutSucceeded  = "InPlaceRolloutSucceeded"
	EventRolloutRolledBack = "InPlaceRolloutRolledBack"
)

// podEvents is the recorder of the pods' Events: those of an update going as planned are left
// out (podFailures); nil when the engine records none.
func (e *Engine) podEvents() inplace.EventRecorder {
	if e.Events == nil {
		return nil
	}
	return podFailures{e.Events}
}

// podFailures records a pod's Events but those of an update going as planned (Updating,
// Updated): the workload's batch Event says that once for the batch.
type podFailures struct{ next inplace.EventRecorder }

func (p podFailures) Record(ctx context.Context, regarding corev1.ObjectReference, ev inplace.Event) error {
	if ev.Type == corev1.EventTypeNormal && (ev.Reason == inplace.EventUpdating || ev.Reason == inplace.EventUpdated) {
		return nil
	}
	return p.next.Record(ctx, regarding, ev)
}

// recordOn records ev on the workload w as observed. An Event is a notice: one not recorded is
// logged, and the rollout goes on.
func (e *Engine) recordOn(ctx context.Context, w workload.Observed, id string, ev inplace.Event) {
	ref, ok := w.Object()
	if e.Events == nil || !ok {
		return
	}
	if err := e.Events.Record(ctx, ref, ev); err != nil {
		e.logFor(w.Ref(), id).Warn("recording an Event", "reason", ev.Reason, "err", err)
	}
}

// batchEvent is the Event of the batch d starts: which pods, to which images. Its related object
// is the batch's first pod, so that two batches' Events are two Events, not one series.
func batchEvent(d decision, st Status, target inplace.Target) inplace.Event {
	names := make([]string, len(d.work))
	for i, p := range d.work {
		names[i] = p.Name
	}
	var changes []string
	for _, c := range slices.Sorted(maps.Keys(target.Images)) {
		changes = append(changes, c+" -> "+target.Images[c])
	}
	first := inplace.PodRef(d.work[0])
	first.ResourceVersion = ""
	return inplace.Event{Type: corev1.EventTypeNormal, Reason: EventBatchUpdating, Related: &first, Message: fmt.Sprintf(
		"batch %d/%d: updating %d pods in place (%s): %s; %d/%d pods updated before it",
		d.batch+1, len(d.counts), len(d.work), strings.Join(firstN(names, 5), ", "), strings.Join(changes, ", "), st.Updated, st.Total)}
}
