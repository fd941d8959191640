package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// measure takes the analysis step that is due for batch d.batch: start its run, or take the
// measurement that is due. The analysis state is written to the lock with each measurement, so
// a restarted driver continues it. A measurement taken goes in c.measured, for decideProgress to
// decide on; otherwise the step ends here (done).
func (e *Engine) measure(ctx context.Context, spec Spec, w workload.Workload, lock *Record, c *census, d decision, st Status) (Status, time.Duration, bool, error) {
	pods := d.counts[d.batch]
	run, err := decodeRun(lock)
	if err != nil {
		return st, 0, true, err
	}
	if run == nil || run.Pods != pods || run.Done() {
		run = analysis.NewRun(spec.Analysis, d.batch+1, e.now())
		run.Pods = pods
		if err := w.SetLock(ctx, withRun(lock, run).encode()); err != nil {
			return st, 0, true, err
		}
		e.logFor(w.Ref(), lock.RolloutID).Info("analysis started", "batch", d.batch+1, "updatedPods", len(c.updated))
		st.Analysis, st.Phase = run, PhaseAnalyzing
		st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; analysing", st.Batch, st.Batches, st.Updated, st.Total)
		return st, max(run.NextAt.Sub(e.now()), busyRequeue), true, nil
	}
	q, err := e.querier(ctx, spec)
	if err != nil {
		return st, 0, true, err
	}
	analyzer := &analysis.Analyzer{Config: spec.Analysis, Querier: q}
	scope := analysis.Scope{Namespace: w.Ref().Namespace, Pods: c.updated, StablePods: podNames(c.pending)}
	stepped, wait := analyzer.Step(ctx, run, scope, e.now())
	st.Analysis, st.Phase = stepped, PhaseAnalyzing
	if stepped == run {
		st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; analysing, next measurement in %s", st.Batch, st.Batches, st.Updated, st.Total, wait.Round(time.Second))
		return st, wait, true, nil
	}
	c.measured, c.nextMeasure = stepped, wait
	return st, 0, false, nil
}

// recordMeasurement records a measurement that reached no verdict yet; the next is due after
// wait.
func (e *Engine) recordMeasurement(ctx context.Context, w workload.Workload, lock *Record, run *analysis.Run, wait time.Duration, st Status) (Status, time.Duration, error) {
	if err := w.SetLock(ctx, withRun(lock, run).encode()); err != nil {
		return st, 0, err
	}
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; analysing (%d measurements)", st.Batch, st.Batches, st.Updated, st.Total, measured(run))
	return st, wait, nil
}

// passBatch accepts the batch analysed: the rollout goes on past its pod count.
func (e *Engine) passBatch(ctx context.Context, w workload.Workload, lock *Record, d decision, st Status) (Status, time.Duration, error) {
	pods := d.counts[d.batch]
	st.Phase = PhaseProgressing
	next := withRun(lock, d.run)
	next.AcceptedPods, next.AcceptedAll, next.ProgressAt = pods, pods >= st.Total, e.now().UTC().Truncate(time.Millisecond)
	if err := w.SetLock(ctx, next.encode()); err != nil {
		return st, 0, err
	}
	e.verdict(w.Ref(), string(d.run.Verdict))
	e.logFor(w.Ref(), lock.RolloutID).Info("analysis passed", "batch", d.batch+1, "verdict", d.run.Verdict, "reason", d.run.Reason,
		"queries", d.run.Queries, "took", e.now().Sub(d.run.StartedAt).Round(time.Millisecond).String())
	st.Message = verdictReason(d)
	e.recordOn(ctx, w, lock.RolloutID, milestone(corev1.EventTypeNormal, EventBatchPassed, lock.RolloutID,
		"passed batch %d/%d: %s; %d/%d pods updated", d.batch+1, len(d.counts), verdictReason(d), st.Updated, st.Total))
	return st, busyRequeue, nil
}

// pauseBatch pauses the rollout on an inconclusive analysis of the batch.
func (e *Engine) pauseBatch(ctx context.Context, w workload.Workload, lock *Record, d decision, st Status) (Status, time.Duration, error) {
	next := withRun(lock, d.run)
	next.Phase, next.Message, next.Reason = PhasePaused, verdictReason(d), ReasonAnalysisInconclusive
	if err := w.SetLock(ctx, next.encode()); err != nil {
		return st, 0, err
	}
	e.verdict(w.Ref(), string(d.run.Verdict))
	e.logFor(w.Ref(), lock.RolloutID).Warn("paused", "batch", d.batch+1, "reason", d.run.Reason)
	st, requeue, err := e.pausedStatus(w, next, st, d.run)
	e.outcome(ctx, w, lock.RolloutID, milestone(corev1.EventTypeNormal, EventRolloutPaused, lock.RolloutID,
		"paused at batch %d/%d: %s; it goes on when its driver accepts the batch, or rolls back when asked", d.batch+1, len(d.counts), verdictReason(d)),
		NotifyPaused, st)
	return st, requeue, err
}

// withRun is a copy of lock with run recorded as its analysis; lock itself without a run.
func withRun(lock *Record, run *analysis.Run) *Record {
	if run == nil {
		return lock
	}
	next := *lock
	next.Analysis = encodeRun(run)
	return &next
}

// paused reports a rollout paused by an inconclusive analysis. It stays paused until a driver
// accepts the batch (Accept) or rolls it back.
func (e *Engine) paused(w workload.Workload, lock *Record) (Status, time.Duration, error) {
	st := Status{RolloutID: lock.RolloutID, Total: w.Replicas()}
	run, err := decodeRun(lock)
	if err != nil {
		return st, 0, err
	}
	return e.pausedStatus(w, lock, st, run)
}

// Pause names a batch paused by an inconclusive analysis: the rollout, the 1-based batch and
// the updated pod count the batch ends at, as the paused Status reports them. The pod count
// tells two pauses of one rollout apart when a hold point, ending a batch of its own, moved the
// batch numbers in between.
type Pause struct {
	RolloutID string
	Batch     int
	Pods      int
}

// PauseOf is the pause st reports, when it reports one.
func PauseOf(st Status) (Pause, bool) {
	if st.Phase != PhasePaused || st.Analysis == nil {
		return Pause{}, false
	}
	return Pause{RolloutID: st.RolloutID, Batch: st.Analysis.Batch, Pods: st.Analysis.Pods}, true
}

// Accept accepts the paused batch p of holder's rollout, as a person who looked at it would: the
// rollout goes on with the next Reconcile. It writes once, and only when the workload's rollout
// is still p's, paused on the analysis of that batch. Anything else (another rollout, another
// batch, not paused) writes nothing and is an *InvalidError that says what is there now: an
// accept that comes late never accepts a later pause.
func (e *Engine) Accept(ctx context.Context, target workload.Ref, holder string, p Pause) (Status, error) {
	st, err := e.accept(ctx, target, holder, p)
	return st, classify(err, st)
}

func (e *Engine) accept(ctx context.Context, target workload.Ref, holder string, p Pause) (Status, error) {
	if err := checkTarget(target); err != nil {
		return Status{}, err
	}
	w, lock, err := e.load(ctx, target)
	if err != nil {
		return Status{}, err
	}
	if lock == nil {
		return Status{}, invalid("%s has no in-place rollout recorded; there is no batch to accept", w.Ref())
	}
	st := Status{RolloutID: lock.RolloutID, Total: w.Replicas()}
	run, err := decodeRun(lock)
	if err != nil {
		return st, err
	}
	switch {
	case lock.Holder != holder:
		return st, invalid("%s is being rolled out by %s (rollout %s); only its holder can accept its batches", w.Ref(), lock.Holder, lock.RolloutID)
	case lock.RolloutID != p.RolloutID:
		return st, invalid("%s: rollout %s is not the workload's rollout (rollout %s is, %s); nothing was accepted", w.Ref(), p.RolloutID, lock.RolloutID, lock.Phase)
	case lock.Phase != PhasePaused:
		return st, invalid("%s: rollout %s is %s, not paused; nothing was accepted", w.Ref(), p.RolloutID, lock.Phase)
	case run == nil:
		return st, invalid("%s: rollout %s is paused with no analysis recorded; nothing was accepted", w.Ref(), p.RolloutID)
	case run.Batch != p.Batch || run.Pods != p.Pods:
		return st, invalid("%s: rollout %s is paused on the analysis of batch %d (%d pods), not batch %d (%d pods); nothing was accepted",
			w.Ref(), p.RolloutID, run.Batch, run.Pods, p.Batch, p.Pods)
	}
	next := *lock
	next.Phase, next.Message, next.Reason = PhaseProgressing, "", ""
	next.ProgressAt = e.now().UTC().Truncate(time.Millisecond)
	next.AcceptedPods, next.AcceptedAll = run.Pods, run.Pods >= w.Replicas()
	if err := w.SetLock(ctx, next.encode()); err != nil {
		return st, err
	}
	e.logFor(w.Ref(), lock.RolloutID).Info("resumed: batch accepted after an inconclusive analysis", "batch", p.Batch, "acceptedPods", next.AcceptedPods)
	st.Phase, st.Message = PhaseProgressing, fmt.Sprintf("batch %d accepted; resuming", p.Batch)
	return st, nil
}

func (e *Engine) pausedStatus(w workload.Workload, lock *Record, st Status, run *analysis.Run) (Status, time.Duration, error) {
	st.Phase, st.Analysis, st.Reason = PhasePaused, run, ReasonAnalysisInconclusive
	st.Message = "paused: " + lock.Message
	return st, 0, nil
}

func decodeRun(lock *Record) (*analysis.Run, error) {
	if len(lock.Analysis) == 0 {
		return nil, nil
	}
	var r analysis.Run
	if err := json.Unmarshal(lock.Analysis, &r); err != nil {
		return nil, fmt.Errorf("decoding the analysis state on the rollout lock: %w", err)
	}
	return &r, nil
}

func encodeRun(r *analysis.Run) json.RawMessage {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("encoding analysis state: %v", err))
	}
	return data
}

func measured(r *analysis.Run) int {
	n := 0
	for _, c := range r.Counts {
		n = max(n, c.Measured+c.Errors)
	}
	return n
}
