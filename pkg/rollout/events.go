package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// The Events the engine records on the workload, so that `kubectl describe` of it tells the
// rollout's story: one at each milestone (started, a batch starting, a batch's analysis passed,
// paused, holding, halted, rolling back, and how it ended), where its pods' progress would
// otherwise be two Events per pod. Each is recorded by the step whose write reached the
// milestone, so a driver started again does not repeat it. A pod still has its own Events when
// its update fails and when a rollback puts it back. Label-selected pods have no object to carry
// them: their rollout records only the pods' own.
const (
	EventRolloutStarted     = "InPlaceRolloutStarted"
	EventBatchUpdating      = "InPlaceBatchUpdating"
	EventBatchPassed        = "InPlaceBatchPassed"
	EventRolloutPaused      = "InPlaceRolloutPaused"
	EventRolloutHolding     = "InPlaceRolloutHolding"
	EventRolloutHalted      = "InPlaceRolloutHalted"
	EventRolloutRollingBack = "InPlaceRolloutRollingBack"
	EventRolloutSucceeded   = "InPlaceRolloutSucceeded"
	EventRolloutRolledBack  = "InPlaceRolloutRolledBack"
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

// startedEvent is the Event of a rollout that starts with the lock next, superseding the
// rollout superseded when that is not empty.
func startedEvent(next *Record, batches []intstr.IntOrString, total int, superseded string) inplace.Event {
	started := "started"
	if superseded != "" {
		started = "started, superseding " + superseded + ","
	}
	return inplace.Event{Type: corev1.EventTypeNormal, Reason: EventRolloutStarted, Message: fmt.Sprintf(
		"rollout %s %s to update %d pods in place (%s) in batches %s", next.RolloutID, started, total, changesOf(next.Images, next.Resources), strings.ReplaceAll(formatBatches(batches), ",", ", "))}
}

// changesOf says which container goes to which image, and to which resources.
func changesOf(images map[string]string, resources map[string]inplace.Resources) string {
	var changes []string
	for _, c := range slices.Sorted(maps.Keys(images)) {
		changes = append(changes, c+" -> "+images[c])
	}
	for _, c := range slices.Sorted(maps.Keys(resources)) {
		changes = append(changes, c+" -> "+inplace.DescribeResources(resources[c]))
	}
	return strings.Join(changes, ", ")
}

// batchEvent is the Event of the batch d starts: which pods, to which images. Its related object
// is the batch's first pod, so that two batches' Events are two Events, not one series.
func batchEvent(d decision, st Status, target inplace.Target) inplace.Event {
	names := make([]string, len(d.work))
	for i, p := range d.work {
		names[i] = p.Name
	}
	first := inplace.PodRef(d.work[0])
	first.ResourceVersion = ""
	return inplace.Event{Type: corev1.EventTypeNormal, Reason: EventBatchUpdating, Related: &first, Message: fmt.Sprintf(
		"batch %d/%d: updating %d pods in place (%s): %s; %d/%d pods updated before it",
		d.batch+1, len(d.counts), len(d.work), strings.Join(firstN(names, 5), ", "), changesOf(target.Images, target.Resources), st.Updated, st.Total)}
}

// milestone is the Event of a milestone of rollout id other than a start or a batch: what
// happened, in words that begin with the rollout.
func milestone(eventType, reason, id, format string, args ...any) inplace.Event {
	return inplace.Event{Type: eventType, Reason: reason, Message: "rollout " + id + " " + fmt.Sprintf(format, args...)}
}
