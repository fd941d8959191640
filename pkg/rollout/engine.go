package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Engine reconciles rollouts. It keeps nothing between calls: every fact it needs is on the
// workload (its lock annotation) and the pods (their state annotations).
type Engine struct {
	Client kubernetes.Interface
	// Events records pod Events; nil records none.
	Events inplace.EventRecorder
	// Registry resolves target tags to digests, and tells a revert whether a tag still resolves
	// to the digest a pod ran; nil resolves nothing: targets keep their tags and reverts go to
	// the recorded digests.
	Registry *registry.Resolver
	// PullerImage is the image holding the puller binary that pre-pull runs on each node: the
	// driver's own image. Empty refuses a spec with PrePull.
	PullerImage string
	// Log receives one line per event, each naming the namespace, the workload and, once
	// known, the rollout id; nil discards.
	Log *slog.Logger
	// Metrics receives the rollouts' events; nil records none.
	Metrics Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Querier answers every analysis' PromQL queries; nil builds a Prometheus client per
	// configuration, from the spec.
	Querier analysis.Querier
	// ErrorBudget is how long Drive retries errors worth a retry before it gives up with an
	// *APIUnavailableError; zero means DefaultErrorBudget.
	ErrorBudget time.Duration

	// Changes, when set, cuts Drive's wait between two steps short: a value on it says the
	// target's pods changed (see workload.WatchPods), so the next step may have work. Steps
	// still read everything from the API server; without it Drive waits what each step asks.
	Changes <-chan struct{}

	// wait replaces Drive's timer in tests; nil waits on a real one.
	wait func(ctx context.Context, d time.Duration) error

	mu          sync.Mutex
	clients     map[string]*analysis.Client // by clientKey
	clientOrder []string                    // keys, oldest first
}

// Intervals at which Reconcile asks to be called again.
const (
	busyRequeue = 200 * time.Millisecond
	idleRequeue = time.Second
)

// Reconcile observes the workload and its pods, takes one bounded step (one workload write, or
// one write for each of at most max-unavailable pods) and returns the new status. Errors of
// type *InvalidError are bad input, with nothing written; *PermanentError an API error no retry
// fixes; *BlockedError something only a person can fix; *SupersededError says that prev's
// rollout was replaced. Other errors are worth a retry. Drive calls it until the rollout
// settles. A rollout that ended is reported as ended when prev names it, and started anew when
// prev is empty (a new run after a rollback).
func (e *Engine) Reconcile(ctx context.Context, spec Spec, prev Status) (Status, Result, error) {
	st, res, err := e.reconcile(ctx, spec, prev)
	return st, res, classify(err, st)
}

func (e *Engine) reconcile(ctx context.Context, spec Spec, prev Status) (Status, Result, error) {
	if err := spec.Validate(); err != nil {
		return prev, Result{}, err
	}
	w, err := workload.Load(ctx, e.Client, spec.Target)
	if err != nil {
		return prev, Result{}, asInvalid(err)
	}
	lock := w.Lock()
	if prev.RolloutID != "" && lock != nil && lock.RolloutID != prev.RolloutID && slices.Contains(lock.Superseded, prev.RolloutID) {
		return prev, Result{}, &SupersededError{RolloutID: prev.RolloutID, By: lock.RolloutID}
	}
	hash := spec.Hash()
	switch {
	case lock != nil && !lock.Active() && prev.RolloutID == lock.RolloutID && lock.HeldBy(spec.Holder, spec.HolderUID):
		// prev's rollout ended in a step whose status the caller did not get (a driver stopped
		// between the two): it reports that end rather than start the images afresh.
		return e.ended(w, lock)
	case lock == nil || !lock.Active():
		return e.start(ctx, spec, w, lock, hash)
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && !spec.TakeOver:
		return prev, Result{}, holderRefusal(w, lock, spec.Holder, "change it")
	case !lock.HeldBy(spec.Holder, spec.HolderUID):
		return e.takeOver(ctx, w, lock, spec.Holder, spec.HolderUID)
	case lock.SpecHash != hash:
		return e.supersede(ctx, spec, w, lock, hash)
	case lock.Phase == workload.LockRollingBack:
		return e.rollBack(ctx, spec.Rollback(), w, lock)
	case lock.Phase == workload.LockPaused:
		return e.paused(w, lock)
	}
	return e.progress(ctx, spec, w, lock)
}

func asInvalid(err error) error {
	var wi *workload.InvalidError
	if errors.As(err, &wi) {
		return &InvalidError{Msg: wi.Msg, Fix: Fix(wi.Fix)}
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

// updater steps pods with the given wait between drain and restart, and progress deadline,
// logging to log.
func (e *Engine) updater(grace, deadline time.Duration, log *slog.Logger) *inplace.Updater {
	return &inplace.Updater{
		Client: e.Client,
		Events: e.Events,
		Log:    log,
		Now:    e.Now,
		// The soak is the batch's (see decideProgress), not each pod's: a pod counts as updated
		// once its new containers run Ready.
		Options: inplace.Options{GracePeriod: grace, ProgressDeadline: deadline},
	}
}

// start checks that the rollout can begin and writes the lock with the freeze, or reports that
// a rollout with this spec already succeeded.
func (e *Engine) start(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock, hash string) (Status, Result, error) {
	// A rollout to these images that was rolled back is no reason to refuse: running again
	// starts a new one, from what the pods run now.
	// Asked anew, a rollout is done only while every pod still has its images (someone may have
	// moved them on since, or the workload recreated them from another template) and, pinned to
	// digests, while its tags still name them: a tag pushed again since starts a new one, to the
	// new content. A driver calling again for the rollout it drives gets its end reported,
	// without asking any registry.
	if lock != nil && lock.HeldBy(spec.Holder, spec.HolderUID) && lock.SpecHash == hash && lock.Phase == workload.LockSucceeded &&
		(!spec.Rerun || stillApplied(w.Pods(), lock.Images) && e.stillPinned(ctx, spec, w, lock)) {
		return e.finished(w, lock, PhaseSucceeded, "rollout "+lock.RolloutID+" succeeded")
	}
	if spec.PrePull && e.PullerImage == "" {
		return Status{}, Result{}, invalid("%s: pre-pull needs the image holding the puller binary, and this driver has none; run without pre-pull", w.Ref())
	}
	if err := w.CheckStart(spec.Images, spec.IncludeInit); err != nil {
		var nr *workload.NotReadyError
		if errors.As(err, &nr) {
			return Status{Phase: PhaseProgressing, Message: nr.Msg}, Result{Phase: PhaseProgressing, RequeueAfter: busyRequeue, Message: nr.Msg}, nil
		}
		return Status{}, Result{}, asInvalid(err)
	}
	if err := workload.CheckKeep(w, spec.Keep); err != nil {
		return Status{}, Result{}, asInvalid(err)
	}
	if err := workload.CheckOwned(w, spec.AllowOwned); err != nil {
		return Status{}, Result{}, asInvalid(err)
	}
	if err := checkStates(w); err != nil {
		return Status{}, Result{}, err
	}
	before, err := beforeImages(w, spec.Images, nil)
	if err != nil {
		return Status{}, Result{}, err
	}
	if spec.Analysis != nil {
		// Check that the analysis can query Prometheus before anything changes.
		q, err := e.querier(ctx, spec)
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
		if !inplace.PodReady(p) {
			unready = append(unready, p.Name)
		}
		if w.Counted(p, spec.Images, nil) {
			onTarget++
		}
	}
	if len(unready) > 0 && !spec.AllowUnready {
		return Status{}, Result{}, &InvalidError{Msg: fmt.Sprintf("%s: %d pods are not Ready (%s); fix them first",
			w.Ref(), len(unready), strings.Join(firstN(unready, 5), ", ")), Fix: FixAllowUnready}
	}
	if _, err := ResolveBatches(spec.Batches, w.Replicas()); err != nil {
		return Status{}, Result{}, err
	}
	pin, err := e.pinTargets(ctx, spec, w, true)
	if err != nil {
		return Status{}, Result{}, err
	}
	if len(pin.digests) > 0 {
		// Pods count as on the target by content: the pinned spelling, or the tag as the digest
		// it names now.
		onTarget = 0
		for _, p := range pods {
			if pin.onContent(w, p, spec.Images) {
				onTarget++
			}
		}
	}
	if tmpl := w.Template(); onTarget == len(pods) && (tmpl == nil || workload.TemplateHasImages(tmpl, spec.Images) || workload.TemplateHasImages(tmpl, pin.images)) {
		msg := alreadyThere(w.Ref().String(), pods, spec.Images)
		if checked := pin.checked(); len(checked) > 0 {
			msg = fmt.Sprintf("%s already runs these images, as %s; nothing to do", w.Ref(), describePinned(checked, spec.Images))
		}
		return Status{Phase: PhaseSucceeded, Total: len(pods), Updated: len(pods), Message: msg}, Result{Phase: PhaseSucceeded, Message: msg}, nil
	}
	next := &workload.Lock{
		Holder:       spec.Holder,
		HolderUID:    spec.HolderUID,
		RolloutID:    rolloutID(hash, e.now()),
		SpecHash:     hash,
		Images:       pin.images,
		BeforeImages: before,
		Phase:        workload.LockProgressing,
		StartedAt:    e.now().UTC().Truncate(time.Second),
	}
	if lock != nil {
		// Puller pods a rollout killed before its end left behind go with it.
		if _, err := e.removePullers(ctx, w.Ref().Namespace, lock.Rollouts()); err != nil {
			return Status{}, Result{}, err
		}
	}
	if lock != nil && next.RolloutID == lock.RolloutID {
		// Started again within the second the last one did: the pods must tell them apart.
		next.RolloutID = rolloutID(hash, lock.StartedAt.Add(time.Second))
	}
	if err := w.Start(ctx, next); err != nil {
		return Status{}, Result{}, err
	}
	if tags := observeTagDigests(pods, pin.unpinned(spec.Images)); len(tags.split()) > 0 {
		e.warnTagDigests(ctx, w.Ref(), next.RolloutID, pods, tags, spec.Images)
	}
	e.warnUnresolved(w.Ref(), next.RolloutID, spec.Images, pin.unresolved)
	e.logFor(w.Ref(), next.RolloutID).Info("rollout started", "images", mustJSON(next.Images), "pods", len(pods))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Message: "started"}
	return st, Result{Phase: PhaseProgressing, Message: st.Message}, nil
}

// supersede replaces the rollout in flight with one to the spec's images. Pods keep the last
// stable image as their BeforeImage, so a rollback returns to what ran before the first one.
func (e *Engine) supersede(ctx context.Context, spec Spec, w workload.Workload, lock *workload.Lock, hash string) (Status, Result, error) {
	if !spec.Supersede {
		return Status{}, Result{}, &InvalidError{Msg: fmt.Sprintf("%s has rollout %s in progress to other images (%s)",
			w.Ref(), lock.RolloutID, mustJSON(lock.Images)), Fix: FixSupersede}
	}
	switch lock.Phase {
	case workload.LockProgressing, workload.LockPaused, workload.LockHolding:
	case workload.LockHalted:
		return Status{}, Result{}, invalid("%s: rollout %s stopped because someone else changed the template (%s); roll it back first, then start the new rollout", w.Ref(), lock.RolloutID, lock.Reason)
	default:
		return Status{}, Result{}, invalid("%s: rollout %s is %s; wait for it to finish before starting another", w.Ref(), lock.RolloutID, lock.Phase)
	}
	// The pods are mid-rollout, so only the images are checked, not the controller's state.
	if err := workload.CheckImages(w, spec.Images, spec.IncludeInit); err != nil {
		return Status{}, Result{}, asInvalid(err)
	}
	if err := workload.CheckKeep(w, spec.Keep); err != nil {
		return Status{}, Result{}, asInvalid(err)
	}
	if err := checkStates(w); err != nil {
		return Status{}, Result{}, err
	}
	pin, err := e.pinTargets(ctx, spec, w, false)
	if err != nil {
		return Status{}, Result{}, err
	}
	next := *lock
	// Containers the earlier rollouts left alone get their before images recorded now.
	if lock.BeforeImages != nil {
		before, err := beforeImages(w, spec.Images, lock.BeforeImages)
		if err != nil {
			return Status{}, Result{}, err
		}
		next.BeforeImages = before
	}
	next.Superseded = lock.Rollouts()
	next.RolloutID = rolloutID(hash, e.now())
	next.SpecHash = hash
	next.Images = pin.images
	next.StartedAt = e.now().UTC().Truncate(time.Second)
	next.Phase, next.Reason, next.ReasonCode = workload.LockProgressing, "", ""
	next.AcceptedPods, next.AcceptedAll, next.HeldAt, next.Analysis = 0, false, 0, nil
	if err := w.Retarget(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.warnUnresolved(w.Ref(), next.RolloutID, spec.Images, pin.unresolved)
	e.logFor(w.Ref(), next.RolloutID).Info("rollout superseded", "superseded", lock.RolloutID, "images", mustJSON(next.Images))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Reason: ReasonSuperseded, Message: "superseded " + lock.RolloutID}
	return st, Result{Phase: PhaseProgressing, Message: st.Message}, nil
}

// ended reports the end of the rollout lock records, which no longer holds the workload.
func (e *Engine) ended(w workload.Workload, lock *workload.Lock) (Status, Result, error) {
	id := lock.RolloutID
	switch lock.Phase {
	case workload.LockSucceeded:
		return e.finished(w, lock, PhaseSucceeded, "rollout "+id+" succeeded")
	case workload.LockRolledBack:
		return e.finished(w, lock, PhaseRolledBack, "rollout "+id+" rolled back: "+lock.Reason)
	case workload.LockReleased:
		return e.finished(w, lock, PhaseReleased, "rollout "+id+" was released")
	}
	st, res, err := e.finished(w, lock, PhaseFailed, "rollout "+id+" failed: "+lock.Reason)
	st.Reason = Reason(lock.ReasonCode)
	return st, res, err
}

// finished reports a rollout that already ended, with its pods counted from their states.
func (e *Engine) finished(w workload.Workload, lock *workload.Lock, phase Phase, msg string) (Status, Result, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: phase, Total: w.Replicas(), Message: msg}
	if phase == PhaseRolledBack {
		st.Reason = Reason(lock.ReasonCode)
	}
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

// firstN keeps the first n of s and says how many more there were, so messages stay small.
func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// checkStates reads every pod's state before the first write: one that cannot be read would
// stop the rollout later, with the workload already frozen.
func checkStates(w workload.Workload) error {
	for _, p := range w.Pods() {
		if _, err := inplace.ReadState(p); err != nil {
			return &InvalidError{Msg: err.Error(), Fix: FixStateAnnotation}
		}
	}
	return nil
}

// maxBeforeImages bounds the distinct images per container a lock records as run before the
// rollout, so the lock stays small whatever the number of pods.
const maxBeforeImages = 16

// beforeImages returns known with, for each container of images it lacks, the distinct images
// the workload's template and pods run: the images a revert may go back to. More than
// maxBeforeImages for one container is refused, as the lock could not record them.
func beforeImages(w workload.Workload, images map[string]string, known map[string][]string) (map[string][]string, error) {
	out := make(map[string][]string, len(images))
	for name, imgs := range known {
		out[name] = slices.Clone(imgs)
	}
	add := func(spec corev1.PodSpec, who string) error {
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for _, c := range list {
				if _, ok := images[c.Name]; !ok || known[c.Name] != nil || slices.Contains(out[c.Name], c.Image) {
					continue
				}
				if len(out[c.Name]) >= maxBeforeImages {
					return invalid("%s: container %q runs more than %d different images across its pods (%s is one more); roll them out in smaller groups, with a narrower selector",
						w.Ref(), c.Name, maxBeforeImages, who)
				}
				out[c.Name] = append(out[c.Name], c.Image)
			}
		}
		return nil
	}
	if tmpl := w.Template(); tmpl != nil {
		if err := add(tmpl.Spec, "the template"); err != nil {
			return nil, err
		}
	}
	for _, p := range w.Pods() {
		if err := add(p.Spec, "pod "+p.Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SupersededError says that the rollout a caller was driving was replaced by another of the
// same holder, which carries its pods on.
type SupersededError struct {
	// RolloutID is the caller's rollout; By the one that replaced it.
	RolloutID, By string
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("rollout %s was superseded by rollout %s; this command's pods are carried on by it", e.RolloutID, e.By)
}

// BlockedError is something on the cluster only a person can fix (a pod's state annotation
// edited into something unreadable): this step wrote nothing, and the same call goes on once it
// is fixed.
type BlockedError struct{ Msg string }

func (e *BlockedError) Error() string { return e.Msg }

// PermanentError is an API error no retry fixes (bad request, forbidden, not found, invalid):
// the caller stops and shows it.
type PermanentError struct {
	Err error
	// RollingBack says a rollback was in progress, and is left incomplete.
	RollingBack bool
	// RolloutID, when set, is the rollout the step was driving, left in flight: the workload
	// still held and Updated pods on the new images. Once the cause is fixed, the same call goes
	// on from there, or a rollback undoes it. Empty, the step changed nothing.
	RolloutID string
	Updated   int
}

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// classify gives an error from a step the type that tells the caller whether to retry.
func classify(err error, st Status) error {
	var (
		inv *InvalidError
		sup *SupersededError
		blk *BlockedError
		se  *inplace.StateError
		le  *workload.LockError
	)
	switch {
	case err == nil, errors.As(err, &inv), errors.As(err, &sup), errors.As(err, &blk):
		return err
	case errors.As(err, &se):
		return &BlockedError{fmt.Sprintf("%v; restore it or remove it (if the pod was updated, put its images back by hand first), then run the same command again to go on, or roll back", err)}
	case errors.As(err, &le):
		return &BlockedError{fmt.Sprintf("%v; nothing was changed: restore the annotation (or correct the field it names), then run the same command again", le)}
	case permanentAPIError(err):
		return &PermanentError{Err: err, RollingBack: st.Phase == PhaseRollingBack, RolloutID: st.RolloutID, Updated: st.Updated}
	}
	return err
}

// permanentAPIError reports whether err carries an API status that no retry changes. Conflicts,
// timeouts, throttling, 5xx and connection errors are not.
func permanentAPIError(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusNotAcceptable, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return true
	}
	return false
}
