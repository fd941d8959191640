package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Engine reconciles rollouts. It keeps nothing between calls: every fact it needs is on the
// workload (its lock annotation) and the pods (their state annotations).
type Engine struct {
	Client kubernetes.Interface
	// Events records pod Events; nil records none.
	Events inplace.EventRecorder
	// TagMoved tells a revert whether a tag still resolves to the digest a pod ran; nil pins
	// reverts to the recorded digest.
	TagMoved inplace.TagMoved
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Querier answers the analysis' PromQL queries; nil builds a Prometheus client from the
	// spec on first use.
	Querier analysis.Querier

	mu sync.Mutex
}

// Intervals at which Reconcile asks to be called again.
const (
	busyRequeue = 200 * time.Millisecond
	idleRequeue = time.Second
)

// Reconcile observes the workload and its pods, takes one bounded step (one workload write, or
// one write for each of at most max-unavailable pods) and returns the new status. Errors of
// type *InvalidError are bad input, with nothing written; other errors are worth a retry.
func (e *Engine) Reconcile(ctx context.Context, spec Spec, prev Status) (Status, Result, error) {
	if err := spec.Validate(); err != nil {
		return prev, Result{}, err
	}
	w, err := workload.Load(ctx, e.Client, spec.Target)
	if err != nil {
		return prev, Result{}, asInvalid(err)
	}
	lock := w.Lock()
	if spec.Rollback {
		return e.reconcileRollback(ctx, spec, w, lock)
	}
	hash := spec.Hash()
	switch {
	case lock == nil || !lock.Active():
		return e.start(ctx, spec, w, lock, hash)
	case lock.Holder != spec.Holder:
		return prev, Result{}, invalid("%s is being rolled out by %s (rollout %s, started %s); only its holder can change it",
			w.Ref(), lock.Holder, lock.RolloutID, lock.StartedAt.Format(time.RFC3339))
	case lock.SpecHash != hash:
		return e.supersede(ctx, spec, w, lock, hash)
	case lock.Phase == workload.LockRollingBack:
		return e.rollBack(ctx, spec, w, lock)
	case lock.Phase == workload.LockPaused:
		return e.paused(ctx, spec, w, lock)
	}
	return e.progress(ctx, spec, w, lock)
}

func asInvalid(err error) error {
	var wi *workload.InvalidError
	if errors.As(err, &wi) {
		return &InvalidError{wi.Msg}
	}
	return err
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) log() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (e *Engine) updater(spec Spec) *inplace.Updater {
	return &inplace.Updater{
		Client:   e.Client,
		Events:   e.Events,
		TagMoved: e.TagMoved,
		Log:      e.Log,
		Now:      e.Now,
		// The soak is the batch's (see soak), not each pod's: a pod counts as updated once its
		// new containers run Ready.
		Options: inplace.Options{GracePeriod: spec.GracePeriod, ProgressDeadline: spec.Timeout},
	}
}

// start checks that the rollout can begin and writes the lock with the freeze, or reports that
// a rollout with this spec already finished.
func (e *Engine) start(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock, hash string) (Status, Result, error) {
	if lock != nil && lock.Holder == spec.Holder && lock.SpecHash == hash {
		switch lock.Phase {
		case workload.LockSucceeded:
			return e.finished(w, lock, PhaseSucceeded, "rollout "+lock.RolloutID+" succeeded")
		case workload.LockRolledBack:
			return e.finished(w, lock, PhaseRolledBack, fmt.Sprintf("rollout %s to these images was rolled back: %s; change the images to start another", lock.RolloutID, lock.Reason))
		}
	}
	if err := w.CheckStart(spec.Images, spec.IncludeInit); err != nil {
		var nr *workload.NotReadyError
		if errors.As(err, &nr) {
			return Status{Phase: PhaseProgressing, Message: nr.Msg}, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: nr.Msg}, nil
		}
		return Status{}, Result{}, asInvalid(err)
	}
	if spec.Analysis != nil {
		// Check that the analysis can query Prometheus before anything changes.
		q, err := e.querier(spec)
		if err == nil {
			_, _, err = q.Query(ctx, "vector(1)")
		}
		if err != nil {
			return Status{}, Result{}, invalid("analysis cannot query Prometheus, so the rollout did not start: %v", err)
		}
	}
	pods := w.Pods()
	var unready []string
	onTarget := 0
	for _, p := range pods {
		if !podReady(p) {
			unready = append(unready, p.Name)
		}
		if w.Counted(p, spec.Images, nil) {
			onTarget++
		}
	}
	if len(unready) > 0 && !spec.AllowUnready {
		return Status{}, Result{}, invalid("%s: %d pods are not Ready (%s); fix them first, or pass --allow-unready",
			w.Ref(), len(unready), strings.Join(firstN(unready, 5), ", "))
	}
	if _, err := ResolveBatches(spec.Batches, w.Replicas()); err != nil {
		return Status{}, Result{}, err
	}
	if tmpl := w.Template(); onTarget == len(pods) && (tmpl == nil || workload.TemplateHasImages(tmpl, spec.Images)) {
		msg := fmt.Sprintf("%s already runs these images; nothing to do", w.Ref())
		return Status{Phase: PhaseSucceeded, Total: len(pods), Updated: len(pods), Message: msg}, Result{Phase: PhaseSucceeded, Message: msg}, nil
	}
	next := &workload.Lock{
		Holder:    spec.Holder,
		RolloutID: rolloutID(hash, e.now()),
		SpecHash:  hash,
		Images:    spec.Images,
		Phase:     workload.LockProgressing,
		StartedAt: e.now().UTC().Truncate(time.Second),
	}
	if err := w.Start(ctx, next); err != nil {
		return Status{}, Result{}, err
	}
	e.log().Info("rollout started", "target", w.Ref().String(), "rollout", next.RolloutID, "images", mustJSON(spec.Images), "pods", len(pods))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Message: "started"}
	return st, Result{Phase: PhaseProgressing, Message: st.Message}, nil
}

// supersede replaces the rollout in flight with one to the spec's images. Pods keep the last
// stable image as their BeforeImage, so a rollback returns to what ran before the first one.
func (e *Engine) supersede(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock, hash string) (Status, Result, error) {
	if !spec.Supersede {
		return Status{}, Result{}, invalid("%s has rollout %s in progress to other images (%s); pass --supersede to replace it, or roll it back first",
			w.Ref(), lock.RolloutID, mustJSON(lock.Images))
	}
	if lock.Phase != workload.LockProgressing && lock.Phase != workload.LockPaused {
		return Status{}, Result{}, invalid("%s: rollout %s is %s; wait for it to finish before starting another", w.Ref(), lock.RolloutID, lock.Phase)
	}
	// The pods are mid-rollout, so only the images are checked, not the controller's state.
	if err := workload.CheckImages(w, spec.Images, spec.IncludeInit); err != nil {
		return Status{}, Result{}, asInvalid(err)
	}
	next := *lock
	next.Superseded = append(slices.Clone(lock.Superseded), lock.RolloutID)
	next.RolloutID = rolloutID(hash, e.now())
	next.SpecHash = hash
	next.Images = spec.Images
	next.StartedAt = e.now().UTC().Truncate(time.Second)
	next.Phase, next.Reason = workload.LockProgressing, ""
	next.AnalyzedBatches, next.Analysis = 0, nil
	if err := w.Retarget(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.log().Info("rollout superseded", "target", w.Ref().String(), "rollout", next.RolloutID, "superseded", lock.RolloutID, "images", mustJSON(spec.Images))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Message: "superseded " + lock.RolloutID}
	return st, Result{Phase: PhaseProgressing, Message: st.Message}, nil
}

// progress advances the batches: it steps the pods in flight, starts pods of the current batch
// up to max-unavailable, and finalizes the workload once every pod is updated.
func (e *Engine) progress(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	total := w.Replicas()
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseProgressing, Total: total}
	labels, ok, err := w.RevisionLabels(lock.Images)
	if err != nil {
		return st, Result{}, err
	}
	if !ok {
		// The controller (or the API server) is behind; the rollout waits for it rather than
		// judge the pods against a revision that does not exist yet.
		st.Message = "waiting for the workload controller to record the new revision"
		if tmpl := w.Template(); tmpl != nil && !workload.TemplateHasImages(tmpl, lock.Images) {
			st.Message = fmt.Sprintf("the template of %s no longer has the rollout's images %s: someone changed it; put them back, or run `inplace-rollout rollback`",
				w.Ref(), mustJSON(lock.Images))
		}
		return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
	}
	target := inplace.Target{Images: lock.Images, IncludeInit: spec.IncludeInit, RolloutID: lock.RolloutID, Labels: labels, Supersedes: lock.Superseded}

	var inflight, pending []*corev1.Pod
	var failed, updated []string
	var ours []*inplace.State
	var soaking []podState // pods this rollout updated, watched through the batch's soak
	var deleting []string
	for _, p := range w.Pods() {
		if p.DeletionTimestamp != nil {
			deleting = append(deleting, p.Name) // the controller recreates it; the new pod is judged then
			continue
		}
		s, err := inplace.ReadState(p)
		if err != nil {
			return st, Result{}, err
		}
		if s != nil && s.RolloutID == lock.RolloutID {
			ours = append(ours, s)
		}
		switch {
		case s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageUpdated:
			updated = append(updated, p.Name)
			soaking = append(soaking, podState{p, s})
		case s != nil && s.RolloutID == lock.RolloutID && s.Stage == inplace.StageFailed:
			failed = append(failed, fmt.Sprintf("pod %s: %s", p.Name, s.Reason))
		case s != nil && s.RolloutID == lock.RolloutID:
			inflight = append(inflight, p)
		case s != nil && !s.Stage.Terminal() && slices.Contains(lock.Superseded, s.RolloutID):
			// A superseded update still on this pod: one already patched finishes before the
			// new one starts; one that never got to the images is taken over or cleared (a
			// drained pod gets its readiness gate back).
			inflight = append(inflight, p)
		case w.Counted(p, lock.Images, labels):
			updated = append(updated, p.Name)
		default:
			pending = append(pending, p)
		}
	}
	st.Updated = len(updated)
	if len(failed) > 0 {
		return e.beginRollback(ctx, w, lock, strings.Join(firstN(failed, 3), "; "), st)
	}

	batches, err := batchCounts(spec.Batches, total)
	if err != nil {
		return st, Result{}, err
	}
	st.Batches = len(batches)
	batch := len(batches) - 1
	for i, n := range batches {
		if st.Updated < n {
			batch = i
			break
		}
	}
	if i := slices.Index(batches, st.Updated); i >= 0 && spec.Soak > 0 && len(inflight) == 0 && len(soaking) > 0 {
		// The batch is complete since its last pod was Updated.
		var done time.Time
		for _, ps := range soaking {
			if ps.state.StageAt.After(done) {
				done = ps.state.StageAt
			}
		}
		if left := done.Add(spec.Soak).Sub(e.now()); left > 0 {
			st.Batch = i + 1
			return e.soak(ctx, w, lock, soaking, left, st)
		}
	}
	if spec.Analysis != nil {
		// A complete batch is analysed before any pod of the next one starts.
		a := lock.AnalyzedBatches
		if a < len(batches) && st.Updated >= batches[a] && len(inflight) == 0 {
			st.Batch = a + 1
			return e.analyze(ctx, spec, w, lock, a, st, updated, podNames(pending))
		}
		batch = min(batch, a)
	}
	st.Batch = batch + 1

	if st.Updated >= total && len(inflight) == 0 && len(pending) == 0 && (spec.Analysis == nil || lock.AnalyzedBatches >= len(batches)) {
		done, err := w.Finalize(ctx, lock)
		if err != nil {
			return st, Result{}, err
		}
		if !done {
			st.Message = "finalizing " + w.Ref().String()
			return st, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: st.Message}, nil
		}
		st.Phase, st.Message = PhaseSucceeded, fmt.Sprintf("%d/%d pods updated in place; %s handed back with the new images", st.Updated, total, w.Ref())
		e.log().Info("rollout succeeded", "target", w.Ref().String(), "rollout", lock.RolloutID, "updated", st.Updated)
		return st, Result{Phase: PhaseSucceeded, Message: st.Message}, nil
	}

	u := e.updater(spec)
	maxUnavailable, err := resolveMaxUnavailable(spec.MaxUnavailable, total)
	if err != nil {
		return st, Result{}, err
	}
	end := batches[batch]
	if batch == len(batches)-1 {
		// The last batch is every pod, however many there are now: after a scale-down the
		// controller may keep an extra one for a while, and it must not be left behind.
		end = max(end, st.Updated+len(inflight)+len(pending))
	}
	start := min(len(pending), maxUnavailable-len(inflight), end-st.Updated-len(inflight))
	work := append(slices.Clone(inflight), pending[:max(start, 0)]...)
	requeue, wrote, failedPod, err := stepPods(work, func(p *corev1.Pod) (inplace.Result, error) {
		res, err := u.UpdatePod(ctx, p, target)
		var ie *inplace.IneligibleError
		if errors.As(err, &ie) && ie.Wait {
			return res, nil
		}
		return res, err
	})
	if err != nil {
		return e.stepFailed(ctx, w, lock, failedPod, err, st)
	}
	// Pods in flight have their own deadline; this one catches a batch whose next pods could
	// not start (unscheduled, not Running, no imageID) for as long.
	if wrote == 0 && len(inflight) == 0 && len(pending) > 0 && e.now().Sub(latest(lastProgress(lock, ours, spec.Soak), lastChange(pending))) >= spec.progressDeadline() {
		return e.beginRollback(ctx, w, lock, fmt.Sprintf("ProgressDeadlineExceeded: batch %d/%d made no progress within %s: %s",
			st.Batch, st.Batches, spec.progressDeadline(), whyWaiting(pending, target)), st)
	}
	started := len(work) - len(inflight)
	st.Updating = len(inflight) + started
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated, %d updating", st.Batch, st.Batches, st.Updated, total, st.Updating)
	if st.Updating == 0 && len(deleting) > 0 {
		st.Message += fmt.Sprintf("; waiting for the controller to replace %s, being deleted", strings.Join(firstN(deleting, 3), ", "))
	}
	return st, Result{Phase: PhaseProgressing, RequeueAfter: requeue, Message: st.Message}, nil
}

// soak waits out the soak of a complete batch, failing the rollout if one of the pods it
// updated crashes or restarts meanwhile.
func (e *Engine) soak(ctx context.Context, w workload.Workload, lock *workload.Lock, pods []podState, left time.Duration, st Status) (Status, Result, error) {
	for _, ps := range pods {
		if why := inplace.CheckUpdated(ps.pod, ps.state); why != "" {
			return e.beginRollback(ctx, w, lock, fmt.Sprintf("pod %s failed during the soak of batch %d: %s", ps.pod.Name, st.Batch, why), st)
		}
	}
	st.Message = fmt.Sprintf("batch %d/%d: %d/%d pods updated; soaking, %s left", st.Batch, st.Batches, st.Updated, st.Total, left.Round(time.Second))
	return st, Result{Phase: PhaseProgressing, RequeueAfter: min(left, idleRequeue), Message: st.Message}, nil
}

// podState is a pod with its state annotation, read once.
type podState struct {
	pod   *corev1.Pod
	state *inplace.State
}

// lastProgress is when the rollout last made progress: it started, a batch passed its analysis,
// one of its pods entered a stage, or a batch's soak ended.
func lastProgress(lock *workload.Lock, states []*inplace.State, soak time.Duration) time.Time {
	t := lock.StartedAt
	if lock.ProgressAt.After(t) {
		t = lock.ProgressAt
	}
	for _, s := range states {
		at := s.StageAt
		if s.Stage == inplace.StageUpdated {
			at = at.Add(soak)
		}
		if at.After(t) {
			t = at
		}
	}
	return t
}

// lastChange is when any of the pods last changed as its status tells: created, or a
// condition turned. A pod recreated or rescheduled while no driver ran gets its full deadline.
func lastChange(pods []*corev1.Pod) time.Time {
	var t time.Time
	for _, p := range pods {
		t = latest(t, p.CreationTimestamp.Time)
		for _, c := range p.Status.Conditions {
			t = latest(t, c.LastTransitionTime.Time)
		}
	}
	return t
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// whyWaiting says why the first of the pods cannot start, and how many wait.
func whyWaiting(pending []*corev1.Pod, target inplace.Target) string {
	p := pending[0]
	why := fmt.Sprintf("pod %s/%s is waiting", p.Namespace, p.Name)
	if plan, err := inplace.Diff(p, target); err != nil {
		why = err.Error()
	} else if err := inplace.CanUpdate(p, plan); err != nil {
		why = err.Error()
	}
	if len(pending) == 1 {
		return why
	}
	return fmt.Sprintf("%s (and %d more pods waiting)", why, len(pending)-1)
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return names
}

// stepFailed handles an error from a pod step: bad input on the pod (it cannot be updated in
// place) fails the rollout; API trouble is retried.
func (e *Engine) stepFailed(ctx context.Context, w workload.Workload, lock *workload.Lock, p *corev1.Pod, err error, st Status) (Status, Result, error) {
	var ie *inplace.IneligibleError
	if errors.As(err, &ie) && !ie.Wait {
		return e.beginRollback(ctx, w, lock, err.Error(), st)
	}
	return st, Result{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
}

// beginRollback writes lock (with any other change it carries) marked rolling back, and why.
func (e *Engine) beginRollback(ctx context.Context, w workload.Workload, lock *workload.Lock, reason string, st Status) (Status, Result, error) {
	next := *lock
	next.Phase, next.Reason = workload.LockRollingBack, reason
	if err := w.SetLock(ctx, &next); err != nil {
		return st, Result{}, err
	}
	e.log().Warn("rolling back", "target", w.Ref().String(), "rollout", lock.RolloutID, "reason", reason)
	st.Phase, st.Message = PhaseRollingBack, "rolling back: "+reason
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// reconcileRollback handles an explicit rollback request: of the rollout in flight, or of the
// last finished one.
func (e *Engine) reconcileRollback(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	switch {
	case lock == nil:
		return Status{}, Result{}, invalid("%s has no in-place rollout recorded; nothing to roll back", w.Ref())
	case lock.Holder != spec.Holder:
		return Status{}, Result{}, invalid("%s was rolled out by %s (rollout %s); only its holder can roll it back", w.Ref(), lock.Holder, lock.RolloutID)
	case lock.Phase == workload.LockRolledBack:
		return e.finished(w, lock, PhaseRolledBack, fmt.Sprintf("rollout %s is rolled back", lock.RolloutID))
	case lock.Phase == workload.LockRollingBack:
		return e.rollBack(ctx, spec, w, lock)
	case lock.Phase == workload.LockProgressing, lock.Phase == workload.LockPaused:
		return e.beginRollback(ctx, w, lock, "rollback requested", Status{RolloutID: lock.RolloutID, Total: w.Replicas()})
	}
	// Succeeded: freeze the workload again, then revert the pods as for a failed rollout.
	next := *lock
	next.Phase, next.Reason = workload.LockRollingBack, "rollback requested"
	if err := w.Start(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.log().Info("rolling back a finished rollout", "target", w.Ref().String(), "rollout", lock.RolloutID)
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas(), Message: "rolling back"}
	return st, Result{Phase: PhaseRollingBack, Message: st.Message}, nil
}

// rollBack reverts every pod the rollout (and the rollouts it superseded) touched, most recent
// first, then restores the workload's previous images and strategy.
func (e *Engine) rollBack(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: PhaseRollingBack, Total: w.Replicas()}
	ours := append(slices.Clone(lock.Superseded), lock.RolloutID)
	var todo, failed []podState
	var strays []*corev1.Pod
	adoption := inplace.Adoption{RolloutID: lock.RolloutID, Images: lock.PreviousImages, ImageIDs: map[string]string{}, Labels: map[string]string{}}
	for _, p := range w.Pods() {
		if p.DeletionTimestamp != nil {
			continue // going away; the controller replaces it from the template Restore puts back
		}
		s, err := inplace.ReadState(p)
		if err != nil {
			return st, Result{}, err
		}
		if s == nil || !slices.Contains(ours, s.RolloutID) {
			// One that does not run (unscheduled, pending) is left to the controller once the
			// template is restored: a revert could never complete on it.
			if w.Ref().Kind != workload.Pods && (s == nil || s.Stage.Terminal()) && p.Status.Phase == corev1.PodRunning &&
				workload.RunsImages(p, lock.Images) && !workload.RunsImages(p, lock.PreviousImages) {
				strays = append(strays, p)
			}
			continue
		}
		for _, c := range s.Containers {
			if c.BeforeImage == lock.PreviousImages[c.Name] && c.BeforeImageID != "" {
				adoption.ImageIDs[c.Name] = c.BeforeImageID
			}
		}
		for k, l := range s.Labels {
			adoption.Labels[k] = l.Before
		}
		switch {
		case s.Stage == inplace.StageRolledBack:
			st.RolledBack++
		case s.Stage == inplace.StageFailed && revertFailed(s):
			failed = append(failed, podState{p, s})
		default:
			todo = append(todo, podState{p, s})
		}
	}
	u := e.updater(spec)
	if len(strays) > 0 {
		// Pods the controller created from the new template while the rollout held the
		// workload: recorded as updated from the previous images, they go back with the rest.
		requeue, _, failedPod, err := stepPods(strays, func(p *corev1.Pod) (inplace.Result, error) { return u.AdoptPod(ctx, p, adoption) })
		if err != nil {
			return st, Result{}, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
		}
		st.Message = fmt.Sprintf("rolling back: %d pods created from the new template meanwhile go back too", len(strays))
		return st, Result{Phase: PhaseRollingBack, RequeueAfter: requeue, Message: st.Message}, nil
	}
	// A failed revert is looked at again: the pod may have got back since (a slow pull
	// finished, a person fixed the cause), and then the rollback goes on.
	var stuck []string
	for _, ps := range failed {
		res, err := u.RevertPod(ctx, ps.pod)
		if err != nil {
			return st, Result{}, fmt.Errorf("pod %s/%s: %w", ps.pod.Namespace, ps.pod.Name, err)
		}
		if res.Stage == inplace.StageRolledBack {
			st.RolledBack++
			continue
		}
		stuck = append(stuck, fmt.Sprintf("pod %s: %s", ps.pod.Name, ps.state.Reason))
	}
	// Most recently started first: the reverse of the order the batches went in. Pods come in
	// update order, so reversing them first also reverses pods that started at the same instant.
	slices.Reverse(todo)
	sort.SliceStable(todo, func(i, j int) bool {
		ri, rj := todo[i].state.Stage == inplace.StageRollingBack, todo[j].state.Stage == inplace.StageRollingBack
		if ri != rj {
			return ri
		}
		return todo[i].state.StartedAt.After(todo[j].state.StartedAt)
	})
	if len(todo) == 0 {
		if len(stuck) > 0 {
			st.Phase, st.Message = PhaseFailed, "rollback incomplete, a person must look: "+strings.Join(stuck, "; ")
			return st, Result{Phase: PhaseFailed, Message: st.Message}, nil
		}
		done, err := w.Restore(ctx, lock)
		if err != nil {
			return st, Result{}, err
		}
		if !done {
			st.Message = "restoring " + w.Ref().String()
			return st, Result{Phase: PhaseRollingBack, RequeueAfter: busyRequeue, Message: st.Message}, nil
		}
		st.Phase = PhaseRolledBack
		st.Message = fmt.Sprintf("rolled back %d pods; %s restored to its previous images (%s): %s", st.RolledBack, w.Ref(), mustJSON(lock.PreviousImages), lock.Reason)
		e.log().Info("rolled back", "target", w.Ref().String(), "rollout", lock.RolloutID, "pods", st.RolledBack)
		return st, Result{Phase: PhaseRolledBack, Message: st.Message}, nil
	}

	maxUnavailable, err := resolveMaxUnavailable(spec.MaxUnavailable, st.Total)
	if err != nil {
		return st, Result{}, err
	}
	var work []*corev1.Pod
	for _, t := range todo[:min(len(todo), maxUnavailable)] {
		work = append(work, t.pod)
	}
	requeue, _, failedPod, err := stepPods(work, func(p *corev1.Pod) (inplace.Result, error) { return u.RevertPod(ctx, p) })
	if err != nil {
		return st, Result{}, fmt.Errorf("pod %s/%s: %w", failedPod.Namespace, failedPod.Name, err)
	}
	st.Updating = min(len(todo), maxUnavailable)
	st.Message = fmt.Sprintf("rolling back: %d pods reverted, %d to go: %s", st.RolledBack, len(todo), lock.Reason)
	return st, Result{Phase: PhaseRollingBack, RequeueAfter: requeue, Message: st.Message}, nil
}

// stepConcurrency bounds the pod steps one Reconcile runs at once.
const stepConcurrency = 16

// stepPods takes one step on each pod, concurrently, and returns when to look again (soon if
// any pod was written or finished, else at the earliest time a pod asked for) and how many pods
// it wrote to. A pod that no longer exists is skipped. The first error is returned with its pod.
func stepPods(pods []*corev1.Pod, step func(*corev1.Pod) (inplace.Result, error)) (time.Duration, int, *corev1.Pod, error) {
	type outcome struct {
		res inplace.Result
		err error
	}
	out := make([]outcome, len(pods))
	sem := make(chan struct{}, stepConcurrency)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].res, out[i].err = step(p)
		}()
	}
	wg.Wait()
	requeue, wrote := idleRequeue, 0
	for i, o := range out {
		if o.res.Wrote {
			wrote++
		}
		switch {
		case apierrors.IsNotFound(o.err):
		case o.err != nil:
			return 0, wrote, pods[i], o.err
		case o.res.Wrote || o.res.Done:
			requeue = busyRequeue
		case o.res.RequeueAfter > 0 && o.res.RequeueAfter < requeue:
			requeue = o.res.RequeueAfter
		}
	}
	return requeue, wrote, nil, nil
}

func (e *Engine) finished(w workload.Workload, lock *workload.Lock, phase Phase, msg string) (Status, Result, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: phase, Total: w.Replicas(), Message: msg}
	for _, p := range w.Pods() {
		s, _ := inplace.ReadState(p)
		if s == nil || s.RolloutID != lock.RolloutID {
			continue
		}
		switch s.Stage {
		case inplace.StageUpdated:
			st.Updated++
		case inplace.StageRolledBack:
			st.RolledBack++
		}
	}
	return st, Result{Phase: phase, Message: msg}, nil
}

// revertFailed reports whether a Failed state is a failed revert (its revert images were set).
func revertFailed(s *inplace.State) bool {
	for _, c := range s.Containers {
		if c.RevertImage != "" {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}
