package rollout

import (
	"log/slog"
	"slices"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Metrics receives the engine's events, each reported by the step whose write made it happen:
// a driver that stops and starts again between two steps neither loses nor repeats one.
type Metrics interface {
	// PodsUpdated: n pods of ref were recorded Updated (on the new images, Ready).
	PodsUpdated(ref workload.Ref, n int)
	// RolledBack: a rollback of ref ended with the workload restored.
	RolledBack(ref workload.Ref)
	// BatchDone: a batch of ref had every pod updated, d after its first pod started.
	BatchDone(ref workload.Ref, d time.Duration)
	// Verdict: a batch analysis of ref ended with verdict (Pass, Fail, Inconclusive, Error).
	Verdict(ref workload.Ref, verdict string)
}

// WorkloadName is ref as KIND/NAME (Pods/SELECTOR for pods by label selector): the workload
// label of metrics and the workload attribute of log lines.
func WorkloadName(ref workload.Ref) string {
	if ref.Kind == workload.Pods {
		return string(ref.Kind) + "/" + ref.Selector
	}
	return string(ref.Kind) + "/" + ref.Name
}

// LogAttrs are the attributes that name ref in a log line: namespace and workload.
func LogAttrs(ref workload.Ref) []any {
	return []any{"namespace", ref.Namespace, "workload", WorkloadName(ref)}
}

// logFor is the engine's logger for one rollout of ref: every line names the workload and,
// when known, the rollout.
func (e *Engine) logFor(ref workload.Ref, rolloutID string) *slog.Logger {
	l := e.log().With(LogAttrs(ref)...)
	if rolloutID != "" {
		l = l.With("rolloutID", rolloutID)
	}
	return l
}

// podsUpdated reports the n pods a step recorded Updated and, when they completed the batch
// in progress, the batch. Its pods are the last ones this rollout started: a batch starts no
// pod before the previous one is complete.
func (e *Engine) podsUpdated(ref workload.Ref, c *census, d decision, n int) {
	if e.Metrics == nil || n == 0 {
		return
	}
	e.Metrics.PodsUpdated(ref, n)
	end := d.counts[d.batch]
	before := len(c.updated)
	if before >= end || before+n < end {
		return
	}
	size := end
	if d.batch > 0 {
		size -= d.counts[d.batch-1]
	}
	started := make([]time.Time, 0, len(c.ours))
	for _, s := range c.ours {
		started = append(started, s.StartedAt)
	}
	slices.SortFunc(started, func(a, b time.Time) int { return a.Compare(b) })
	if len(started) == 0 {
		return
	}
	first := started[max(len(started)-size, 0)]
	e.Metrics.BatchDone(ref, max(e.now().Sub(first), 0))
}

// rolledBack reports a rollback that ended with the workload restored.
func (e *Engine) rolledBack(ref workload.Ref) {
	if e.Metrics != nil {
		e.Metrics.RolledBack(ref)
	}
}

// verdict reports the verdict of a batch analysis, once written.
func (e *Engine) verdict(ref workload.Ref, v string) {
	if e.Metrics != nil && v != "" {
		e.Metrics.Verdict(ref, v)
	}
}

// countUpdated counts the results of a step that recorded a pod Updated.
func countUpdated(res inplace.Result) bool {
	return res.Wrote && res.Stage == inplace.StageUpdated
}
