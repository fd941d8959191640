package rollout

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Metrics receives the engine's events, each reported by the step whose write made it happen:
// a driver that stops and starts again between two steps neither loses nor repeats one.
type Metrics interface {
	// PodsUpdated: n more pods of ref are updated (on the new images, Ready), as a lock write
	// records their count.
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

// lockWrites is a workload whose lock writes are noted: a pod's update ends with no write of
// its own, so the pods counted updated are reported to Metrics by the step whose lock write
// records that count (Record.Reported), and by no other.
type lockWrites struct {
	workload.Workload
	wrote bool
}

func (l *lockWrites) SetLock(ctx context.Context, record string) error {
	err := l.Workload.SetLock(ctx, record)
	l.wrote = l.wrote || err == nil
	return err
}

func (l *lockWrites) Finalize(ctx context.Context, record string, ch workload.Change) (bool, error) {
	done, err := l.Workload.Finalize(ctx, record, ch)
	l.wrote = l.wrote || done && err == nil
	return done, err
}

// withReported is lock recording that Metrics heard of the pods c counts updated: what the
// step's lock write, if any, carries.
func withReported(lock *Record, c *census) *Record {
	next := *lock
	next.Reported = max(lock.Reported, len(c.updated))
	return &next
}

// podsUpdated reports, once the step wrote the lock recording it, the pods counted updated
// since the last count a lock recorded (before), and each batch they completed, timed from its
// first pod's start to the last pod's update: the written count makes a driver that stops and
// starts again between two steps neither lose nor repeat one.
func (e *Engine) podsUpdated(ref workload.Ref, c *census, d decision, before, after int) {
	if e.Metrics == nil || after <= before {
		return
	}
	e.Metrics.PodsUpdated(ref, after-before)
	started := make([]time.Time, 0, len(c.ours))
	for _, s := range c.ours {
		started = append(started, s.StartedAt)
	}
	slices.SortFunc(started, func(a, b time.Time) int { return a.Compare(b) })
	from := 0
	for _, end := range d.counts {
		if before < end && end <= after && len(started) > 0 {
			first := started[min(from, len(started)-1)]
			e.Metrics.BatchDone(ref, max(c.batchDone.Sub(first), 0))
		}
		from = end
	}
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
