package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

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
	// Querier answers every analysis' PromQL queries; nil builds a Prometheus client per
	// configuration, from the spec.
	Querier analysis.Querier

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
		msg := alreadyThere(w.Ref().String(), pods, spec.Images)
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
	if tags := observeTagDigests(pods, spec.Images); len(tags.split()) > 0 {
		e.log().Warn("pods run one target tag as different content: the tag was pushed again between pulls", "target", w.Ref().String(),
			"digests", tags.describe(spec.Images))
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
	next.Phase, next.Reason, next.ReasonCode = workload.LockProgressing, "", ""
	next.AnalyzedBatches, next.Analysis = 0, nil
	if err := w.Retarget(ctx, &next); err != nil {
		return Status{}, Result{}, err
	}
	e.log().Info("rollout superseded", "target", w.Ref().String(), "rollout", next.RolloutID, "superseded", lock.RolloutID, "images", mustJSON(spec.Images))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Reason: ReasonSuperseded, Message: "superseded " + lock.RolloutID}
	return st, Result{Phase: PhaseProgressing, Message: st.Message}, nil
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
