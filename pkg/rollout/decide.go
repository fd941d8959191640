package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// action is the next step of a progressing rollout.
type action int

const (
	// actStep steps the pods in flight and starts pods of the current batch.
	actStep action = iota
	actRollBack
	actSoak
	// actAnalyze takes the analysis step that is due: start the batch's run, or measure.
	actAnalyze
	actHold
	// actMoveOn leaves the hold point: the rollout may go further now.
	actMoveOn
	actFinalize
	// actHalt stops the rollout on a template someone else changed.
	actHalt
	// actResume puts a halted rollout back to progressing: its template has the rollout's
	// images again.
	actResume
	// actWaitRevision waits for the workload controller to record the new revision.
	actWaitRevision
	// actPull removes the puller pods that are done, or creates the missing ones.
	actPull
	// actWaitPull waits for the nodes of the pods to start to pull the new images.
	actWaitPull
	// actRecord records a measurement of the analysis that reached no verdict yet; actPass
	// accepts the batch analysed; actPause pauses the rollout on an inconclusive analysis.
	actRecord
	actPass
	actPause
)

// rollbackCause is why decideProgress rolls a rollout back.
type rollbackCause string

// The causes of a rollback, each with the reason the rollout reports in rollbackCauses.
const (
	// causePodFailed: a pod failed its update.
	causePodFailed rollbackCause = "PodFailed"
	// causePodDeadline: every pod that failed its update made no progress within its deadline.
	causePodDeadline rollbackCause = "PodDeadline"
	// causeBatchStalled: no pod of the batch could start, or become Ready, within the deadline.
	causeBatchStalled rollbackCause = "BatchStalled"
	// causeIneligible: a pod about to start can never be updated in place.
	causeIneligible rollbackCause = "Ineligible"
	// causeFailedInSoak: an updated pod failed during its batch's soak.
	causeFailedInSoak rollbackCause = "FailedInSoak"
	// causeFailedAfterUpdate: an updated pod failed later, its batch's soak over (or none).
	causeFailedAfterUpdate rollbackCause = "FailedAfterUpdate"
	// causeAnalysisFailed: the analysis of a batch failed, or could not measure.
	causeAnalysisFailed rollbackCause = "AnalysisFailed"
	// causeAnalysisInconclusive: the analysis of a batch was inconclusive, and the spec says
	// fail on that.
	causeAnalysisInconclusive rollbackCause = "AnalysisInconclusive"
	// causePrePullFailed: pulling the new images onto the nodes of the pods to start failed.
	causePrePullFailed rollbackCause = "PrePullFailed"
)

// rollbackCauses are the reasons a rollback for each cause reports.
var rollbackCauses = map[rollbackCause]Reason{
	causePodFailed:            ReasonPodFailed,
	causePodDeadline:          ReasonDeadlineExceeded,
	causeBatchStalled:         ReasonDeadlineExceeded,
	causeIneligible:           ReasonPodFailed,
	causeFailedInSoak:         ReasonPodFailed,
	causeFailedAfterUpdate:    ReasonPodFailed,
	causeAnalysisFailed:       ReasonAnalysisFailed,
	causeAnalysisInconclusive: ReasonAnalysisInconclusive,
	causePrePullFailed:        ReasonPrePullFailed,
}

// decision is what decideProgress chose, with what the step needs.
type decision struct {
	action action
	// counts are the batches' cumulative pod counts, the hold point among them; batch is the
	// 0-based index of the batch in progress (actAnalyze: the batch analysed).
	counts []int
	batch  int
	// cause and reason say why to roll back.
	cause  rollbackCause
	reason string
	// soakLeft is how long the batch still soaks.
	soakLeft time.Duration
	// upTo is the hold point as a pod count.
	upTo int
	// work are the pods to step (actStep); budget how many more pods could have gone down
	// under maxUnavailable.
	work                   []*corev1.Pod
	budget, maxUnavailable int
	// startsBatch says work starts the batch: every pod of the batches before it is updated and
	// none of its own has started. Its Event, on the workload, says so once per batch.
	startsBatch bool
	// pulls is the pre-pull work (actPull); unpulled name the pods whose nodes still pull
	// (actWaitPull).
	pulls    pullPlan
	unpulled []string
	// run is the analysis run just measured, when the decision acts on it.
	run *analysis.Run
}

// rollBack decides to roll back, for cause, saying why.
func (d *decision) rollBack(cause rollbackCause, reason string) {
	d.action, d.cause, d.reason = actRollBack, cause, reason
}

// code is the reason a rollback reports.
func (d decision) code() Reason { return rollbackCauses[d.cause] }

// decideProgress decides the next step of a progressing rollout from what observe saw, alone:
// why a rollout halts, waits, rolls back, soaks, analyses, holds, finalizes or steps is decided
// here, in this order, and nowhere else.
func decideProgress(c *census, spec Spec, lock *Record, total int, now time.Time) (decision, error) {
	if d, ok := decideTemplate(c); ok {
		return d, nil
	}
	d, err := decideBatch(c, spec, total)
	if err != nil {
		return d, err
	}
	if !decideFailure(c, &d) && !decideSoak(c, spec, now, &d) && !decideAnalysis(c, spec, lock, total, &d) && !decideEnd(c, spec, lock, total, &d) {
		if err := decideStep(c, spec, lock, total, &d); err != nil {
			return d, err
		}
	}
	decidePrePull(c, spec, now, &d)
	if d.action == actStep {
		decideWork(c, spec, lock, now, &d)
	}
	return d, nil
}

// decideTemplate decides on what comes before the pods: a template someone else changed halts
// the rollout (nothing is rolled back: a person decides); a halted rollout whose template has
// its images again goes on; a revision the controller has not recorded yet is waited for,
// rather than judge the pods against one that does not exist.
func decideTemplate(c *census) (decision, bool) {
	switch {
	case c.foreign != nil:
		return decision{action: actHalt}, true
	case c.halted:
		return decision{action: actResume}, true
	case c.revisionPending:
		return decision{action: actWaitRevision}, true
	}
	return decision{}, false
}

// decideBatch works out the batches, the hold point among them, and the batch in progress: the
// first that ends above the pods updated.
func decideBatch(c *census, spec Spec, total int) (decision, error) {
	var d decision
	counts, err := batchCounts(spec.Batches, total)
	if err != nil {
		return d, err
	}
	upTo, err := resolveUpTo(spec.UpTo, total)
	if err != nil {
		return d, err
	}
	d.counts, d.upTo = withHoldPoint(counts, upTo), upTo
	d.batch = len(d.counts) - 1
	for i, n := range d.counts {
		if len(c.updated) < n {
			d.batch = i
			break
		}
	}
	return d, nil
}

// decideFailure rolls back on pods that failed their update: DeadlineExceeded when every one of
// them made no progress within its deadline.
func decideFailure(c *census, d *decision) bool {
	if len(c.failed) == 0 {
		return false
	}
	cause := causePodDeadline
	reasons := make([]string, 0, len(c.failed))
	for _, f := range c.failed {
		if f.code != inplace.FailureDeadlineExceeded {
			cause = causePodFailed
		}
		reasons = append(reasons, fmt.Sprintf("pod %s: %s", f.pod, f.reason))
	}
	d.rollBack(cause, strings.Join(firstN(reasons, 3), "; "))
	return true
}

// decideSoak soaks a batch complete since its last pod counted as updated (the last of the pods
// this rollout updated, or of those the controller created from the new template: a scale-up
// can complete a batch); its soak runs in full from then. An updated pod that fails, in the
// soak or after it, rolls the rollout back.
func decideSoak(c *census, spec Spec, now time.Time, d *decision) bool {
	failing, why := failingUpdated(c.soaking)
	if i := slices.Index(d.counts, len(c.updated)); i >= 0 && spec.Soak > 0 && len(c.inflight) == 0 && !c.batchDone.IsZero() {
		if left := c.batchDone.Add(spec.Soak).Sub(now); left > 0 {
			d.batch = i
			if failing != nil {
				d.rollBack(causeFailedInSoak, fmt.Sprintf("pod %s failed during the soak of batch %d: %s", failing.Name, i+1, why))
			} else {
				d.action, d.soakLeft = actSoak, left
			}
			return true
		}
	}
	if failing != nil {
		// Past its soak, a pod this rollout updated that crashes or keeps restarting on the new
		// images still fails the rollout: counting it as merely down would stall the next batch
		// until the progress deadline.
		d.rollBack(causeFailedAfterUpdate, fmt.Sprintf("pod %s failed after its update: %s", failing.Name, why))
		return true
	}
	return false
}

// failingUpdated is the first of the updated pods that no longer holds, and why.
func failingUpdated(soaking []podState) (*corev1.Pod, string) {
	for _, ps := range soaking {
		if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
			return ps.pod, why
		}
	}
	return nil, ""
}

// acceptedPods is the progress of the analysis: the pod count accepted. Until the batch of every
// pod passed, a count at or above the pods there are now (the workload was scaled down) still
// leaves the last batch to analyse.
func acceptedPods(lock *Record, total int) int {
	if lock.AcceptedAll {
		return lock.AcceptedPods
	}
	return min(lock.AcceptedPods, total-1)
}

// decideAnalysis analyses a complete batch before any pod of the next one starts: the first
// batch that ends above the count accepted. A measurement just taken (c.measured) is decided on.
func decideAnalysis(c *census, spec Spec, lock *Record, total int, d *decision) bool {
	if spec.Analysis == nil {
		return false
	}
	accepted := acceptedPods(lock, total)
	a := len(d.counts)
	for i, n := range d.counts {
		if n > accepted {
			a = i
			break
		}
	}
	if a < len(d.counts) && len(c.updated) >= d.counts[a] && len(c.inflight) == 0 {
		d.action, d.batch = actAnalyze, a
		if c.measured != nil {
			decideMeasured(c.measured, spec.OnInconclusive, d)
		}
		return true
	}
	d.batch = min(d.batch, a)
	return false
}

// decideMeasured decides on a measurement of the analysis of batch d.batch: record it, accept
// the batch, pause, or roll back.
func decideMeasured(run *analysis.Run, onInconclusive string, d *decision) {
	d.run = run
	v := decideVerdict(run, onInconclusive)
	switch v.outcome {
	case verdictPending:
		d.action = actRecord
	case verdictPass:
		d.action = actPass
	case verdictPause:
		d.action = actPause
	default:
		d.rollBack(v.cause, verdictReason(*d))
	}
}

// verdictReason says what the analysis of the batch decided on concluded.
func verdictReason(d decision) string {
	return fmt.Sprintf("analysis of batch %d: %s: %s", d.batch+1, d.run.Verdict, d.run.Reason)
}

// verdictOutcome is what a batch's analysis calls for.
type verdictOutcome int

const (
	// verdictPending: no verdict yet; the measurement is recorded and the analysis goes on.
	verdictPending verdictOutcome = iota
	verdictPass
	verdictPause
	verdictFail
)

// verdictDecision is what decideVerdict chose; cause says why a failing verdict rolls back.
type verdictDecision struct {
	outcome verdictOutcome
	cause   rollbackCause
}

// decideVerdict decides what an analysis run's verdict calls for, with onInconclusive (the
// spec's OnInconclusive) saying what an Inconclusive one does: pause (the default), fail or
// continue as if it passed. Fail and Error fail.
func decideVerdict(run *analysis.Run, onInconclusive string) verdictDecision {
	switch run.Verdict {
	case "":
		return verdictDecision{outcome: verdictPending}
	case analysis.Pass:
		return verdictDecision{outcome: verdictPass}
	case analysis.Inconclusive:
		switch onInconclusive {
		case InconclusiveFail:
			return verdictDecision{outcome: verdictFail, cause: causeAnalysisInconclusive}
		case InconclusiveContinue:
			return verdictDecision{outcome: verdictPass}
		}
		return verdictDecision{outcome: verdictPause}
	}
	return verdictDecision{outcome: verdictFail, cause: causeAnalysisFailed}
}

// decideEnd holds at the hold point, leaves a hold point the spec moved, or finalizes once every
// pod runs the new images. A holding rollout whose hold point stays keeps holding while one of
// its pods, unready for a while, is judged in flight again.
func decideEnd(c *census, spec Spec, lock *Record, total int, d *decision) bool {
	updated := len(c.updated)
	accepted := func(n int) bool { return spec.Analysis == nil || acceptedPods(lock, total) >= n }
	switch {
	case d.upTo < total && updated >= d.upTo && len(c.inflight) == 0 && accepted(d.upTo):
		d.action, d.batch = actHold, slices.Index(d.counts, d.upTo)
	case lock.Phase == PhaseHolding && d.upTo != lock.HeldAt:
		d.action = actMoveOn
	case updated >= total && len(c.inflight) == 0 && len(c.pending) == 0 && len(c.arriving) == 0 && accepted(total):
		d.action = actFinalize
	default:
		return false
	}
	return true
}

// decideStep picks the pods to step: those in flight, then the batch's next pending pods in
// order, while no more than max-unavailable pods are down.
func decideStep(c *census, spec Spec, lock *Record, total int, d *decision) error {
	var err error
	d.action = actStep
	if d.maxUnavailable, err = resolveMaxUnavailable(spec.MaxUnavailable, total); err != nil {
		return err
	}
	updated := len(c.updated)
	end := d.counts[d.batch]
	if d.batch == len(d.counts)-1 {
		// The last batch is every pod, however many there are now: after a scale-down the
		// controller may keep an extra one for a while, and it must not be left behind.
		end = max(end, updated+len(c.inflight)+len(c.arriving)+len(c.pending))
	}
	if d.upTo < total {
		// No pod starts past the hold point, even one lowered below what is updated or in
		// flight: those finish, and the rollout holds there.
		end = min(end, max(d.upTo, updated+len(c.inflight)+len(c.arriving)))
	}
	d.budget = d.maxUnavailable - len(c.down) - c.missing
	room := end - updated - len(c.inflight) - len(c.arriving)
	d.work = slices.Clone(c.inflight)
	for _, p := range c.pending {
		if room <= 0 {
			break
		}
		if !inplace.PodReady(p) && unreadySince(p, lock.StartedAt) {
			// Already down before the rollout started: updating it takes nothing more away.
			d.work, room = append(d.work, p), room-1
			continue
		}
		if d.budget <= 0 {
			break // in order: a later pod does not overtake one that waits
		}
		d.work, room, d.budget = append(d.work, p), room-1, d.budget-1
	}
	before := 0
	if d.batch > 0 {
		before = d.counts[d.batch-1]
	}
	d.startsBatch = len(d.work) > 0 && updated == before && len(c.inflight) == 0 && len(c.arriving) == 0
	return nil
}

// decideWork decides on the pods about to be stepped: one that can never be updated in place
// rolls the rollout back, before any write to it. So does a batch that made no progress within
// the progress deadline, judged only when the step would write to no pod: each one to step
// waits to start, or none may start.
func decideWork(c *census, spec Spec, lock *Record, now time.Time, d *decision) {
	for _, p := range d.work {
		if r := c.refused[p.Name]; r != nil {
			d.rollBack(causeIneligible, r.Error())
			return
		}
	}
	if slices.ContainsFunc(d.work, func(p *corev1.Pod) bool { return !c.waiting[p.Name] }) || !batchStalled(c, lock, spec, now) {
		return
	}
	d.rollBack(causeBatchStalled, fmt.Sprintf("ProgressDeadlineExceeded: batch %d/%d made no progress within %s: %s",
		d.batch+1, len(d.counts), spec.progressDeadline(), whyWaiting(c.arriving, c.pending, c.down, c.missing, d.maxUnavailable, c.target)))
}

// batchStalled reports whether the batch made no progress within the progress deadline: no pod
// is in flight (those have their own deadline), and the batch's next pods could not start
// (unscheduled, not Running, others down) or, created from the new template, did not become
// Ready, for as long.
func batchStalled(c *census, lock *Record, spec Spec, now time.Time) bool {
	waiting := append(slices.Clone(c.arriving), c.pending...)
	if len(c.inflight) > 0 || len(waiting) == 0 {
		return false
	}
	since := latest(latest(lastProgress(lock, c), c.batchDone.Add(spec.Soak)), lastChange(waiting))
	return now.Sub(since) >= spec.progressDeadline()
}

// withHoldPoint adds the hold point to the batches' counts, so that it ends a batch: the pods up
// to it soak and are analysed before the rollout holds there.
func withHoldPoint(counts []int, upTo int) []int {
	if slices.Contains(counts, upTo) {
		return counts
	}
	out := slices.Clone(counts)
	i, _ := slices.BinarySearch(out, upTo)
	return slices.Insert(out, i, upTo)
}
