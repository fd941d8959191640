// Package orphan finds the rollouts that our controllers' objects left behind and rolls them back.
//
// A CustomRun or an InPlaceRollout deleted in flight rolls its rollout back first, held by its
// finalizer. One whose finalizer was removed by hand, or that was force-deleted, leaves its
// workload held by a holder nobody drives any longer: a Scanner finds such locks (a holder of
// the controller's prefix whose object is gone from the controller's cache, or is another object
// of the same name) and rolls them back, at the defaults' pace, since the object's own spec went
// with it. Both controllers run one; the Argo plugin has its own scan (plugin/step), since Argo
// calls it with the Rollouts.
package orphan

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/internal/keyqueue"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

const (
	// Settle is how long a scan waits after an object of ours is deleted: the runs of a
	// PipelineRun, or the objects of a namespace, go together, and one scan then sees all of
	// them gone.
	Settle = 2 * time.Second
	// DefaultEvery is the pace of the scan without deletions when Config.Every is not set.
	DefaultEvery = 5 * time.Minute
	// minRequeue keeps a step that asks to be called again at once from spinning.
	minRequeue = 200 * time.Millisecond
)

// Config says whose rollouts a Scanner looks after.
type Config struct {
	// Kind names the objects in log lines ("CustomRun").
	Kind string
	// Prefix begins the holder of every lock the controller writes ("tekton:"); the holder is
	// Prefix + NAMESPACE/NAME of the object.
	Prefix string
	// Namespace is the controller's scope; empty is every namespace.
	Namespace string
	// Get reads the object namespace/name from the controller's cache: its UID, and whether it
	// is there.
	Get func(namespace, name string) (types.UID, bool)
	// Engine reads the locks and rolls back.
	Engine *rollout.Engine
	// Every is the pace of the scan without deletions [DefaultEvery].
	Every time.Duration
	// Log receives one line per event; nil discards.
	Log *slog.Logger
}

// Scanner scans for the rollouts of deleted objects and rolls them back, one step at a time.
type Scanner struct {
	cfg Config
	log *slog.Logger
	// queue holds, by target, the rollbacks under way; rollbacks keeps where each is.
	queue     workqueue.TypedRateLimitingInterface[rollout.Ref]
	rollbacks rollbacks
	// deleted asks the scan loop for a scan: an object of ours was deleted.
	deleted chan struct{}
}

// New builds a Scanner; Run runs it.
func New(cfg Config) *Scanner {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	return &Scanner{
		cfg: cfg,
		log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[rollout.Ref](keyqueue.FirstBackoff, keyqueue.MaxBackoff),
			workqueue.TypedRateLimitingQueueConfig[rollout.Ref]{Name: "orphaned-" + strings.ToLower(cfg.Kind) + "-rollouts"}),
		deleted: make(chan struct{}, 1),
	}
}

// Deleted asks for a scan, Settle from now: an object of ours was deleted, and without its
// finalizer (removed by hand, or force-deleted) its rollout is left to the scan.
func (s *Scanner) Deleted() {
	select {
	case s.deleted <- struct{}{}:
	default:
		// A scan is due already; it sees every deletion so far.
	}
}

// Pending is how many scans are asked for and not begun (0 or 1).
func (s *Scanner) Pending() int { return len(s.deleted) }

// Run scans at once, every Config.Every, and Settle after a deletion, and takes the rollbacks'
// steps with one worker (deleted objects' rollouts are rare, and each step is bounded), until
// ctx ends.
func (s *Scanner) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		for s.Next(ctx) {
		}
	})
	wg.Go(func() { s.scanLoop(ctx) })
	wg.Wait()
}

// ShutDown stops the worker, for a Scanner whose Run is not running (tests).
func (s *Scanner) ShutDown() { s.queue.ShutDown() }

// ShuttingDown reports whether the worker stops, or stopped.
func (s *Scanner) ShuttingDown() bool { return s.queue.ShuttingDown() }

func (s *Scanner) scanLoop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Every)
	defer tick.Stop()
	for {
		s.Scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.deleted:
			select {
			case <-ctx.Done():
				return
			case <-time.After(Settle):
			}
		}
	}
}

// Scan queues the rollback of every lock, in the controller's scope, of an object that no
// longer exists, and returns how many it queued. The locks are listed before the objects are
// looked up: a lock listed was written for an object the controller's cache lists (it watched
// them before it led, and only the leader writes locks), unless the object was deleted since.
func (s *Scanner) Scan(ctx context.Context) int {
	recs, err := s.cfg.Engine.ListRecords(ctx, s.cfg.Namespace, s.cfg.Prefix)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("listing the workloads held for "+s.cfg.Kind+"s, to find those of deleted ones", "namespace", s.cfg.Namespace, "err", err)
	}
	queued := 0
	for i := range recs {
		rec := &recs[i]
		if action, _ := decide(rec, holderOf(rec), s.lookup(rec.Holder), s.cfg.Kind); action == rollBack && s.rollbacks.add(rec.Target, holderOf(rec)) {
			s.queue.Add(rec.Target)
			queued++
		}
	}
	return queued
}

// lookup says what the cache holds of the object holder names.
func (s *Scanner) lookup(holder string) lookup {
	ns, name, ok := strings.Cut(strings.TrimPrefix(holder, s.cfg.Prefix), "/")
	if !strings.HasPrefix(holder, s.cfg.Prefix) || !ok || ns == "" || name == "" || s.cfg.Namespace != "" && ns != s.cfg.Namespace {
		return lookup{}
	}
	uid, found := s.cfg.Get(ns, name)
	return lookup{Watched: true, Found: found, UID: uid}
}

// Next takes the next step of the next rollback of the queue; false once the queue shut down.
func (s *Scanner) Next(ctx context.Context) bool {
	target, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(target)
	if ctx.Err() != nil {
		// Stopping, or the Lease lost: another replica may lead now, so no step more.
		return false
	}
	o, ok := s.rollbacks.get(target)
	if !ok {
		s.queue.Forget(target)
		return true
	}
	requeue, err := s.step(ctx, target, o)
	switch {
	case err != nil:
		s.log.With(rollout.LogAttrs(target)...).Warn("rollback step of a deleted "+s.cfg.Kind+"'s rollout failed, retrying", "holder", o.seen.Holder, "err", err)
		s.queue.AddRateLimited(target)
	case requeue > 0:
		s.queue.Forget(target)
		s.queue.AddAfter(target, requeue)
	default:
		s.queue.Forget(target)
		s.rollbacks.drop(target)
	}
	return true
}

// step takes one step of the rollback of the rollout o.seen left on target, when the lock still
// says so, and returns when to take the next (0: the rollback is over, or not to be taken). A
// returned error is worth a retry.
func (s *Scanner) step(ctx context.Context, target rollout.Ref, o rollback) (time.Duration, error) {
	e, kind := s.cfg.Engine, s.cfg.Kind
	log := s.log.With(append([]any{"holder", o.seen.Holder, "holderUID", o.seen.UID}, rollout.LogAttrs(target)...)...)
	rec, err := e.Record(ctx, target)
	switch {
	case err != nil && rollout.OutcomeOf(rollout.Status{}, err).Kind == rollout.BadInput:
		log.Info("not rolling back the rollout of a deleted "+kind+": its workload is gone", "err", err)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the rollout lock of %s: %w", target, err)
	}
	action, why := decide(rec, o.seen, s.lookup(o.seen.Holder), kind)
	if action == leave {
		log.Info("not rolling back the rollout of a deleted "+kind, "why", why)
		return 0, nil
	}
	log = log.With("rolloutID", rec.RolloutID)
	if !o.started {
		log.Warn("rolling back the rollout of a deleted "+kind, "phase", rec.Phase, "why", why)
		o.started = true
	}
	// The object's own pace went with its spec: one pod at a time, within the default deadline.
	rb := rollout.RollbackSpec{Target: target, Holder: o.seen.Holder, HolderUID: o.seen.UID,
		MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}
	st, requeue, err := e.Abort(context.WithoutCancel(ctx), rb, o.prev)
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		s.rollbacks.set(target, o)
		return 0, fmt.Errorf("rolling back %s, left by %s: %w", target, o.seen.Holder, err)
	case rollout.BadInput:
		// The lock changed between the read and the step (another holder's now, say).
		log.Info("not rolling back the rollout of a deleted "+kind, "why", err.Error())
		return 0, nil
	case rollout.Refused, rollout.Blocked, rollout.Superseded:
		// The next scan finds the lock again if it still holds the workload for nobody.
		log.Error("the rollback of a deleted "+kind+"'s rollout stopped; a person must look", "err", err)
		return 0, nil
	case rollout.RolledBack:
		log.Info("rolled back the rollout of a deleted "+kind, "rolledBack", st.RolledBack, "message", st.Message)
		return 0, nil
	case rollout.NeedsPerson:
		log.Error("the rollback of a deleted "+kind+"'s rollout is incomplete; a person must look", "reason", st.Reason, "message", st.Message)
		return 0, nil
	case rollout.Succeeded:
		log.Info("the rollout of a deleted "+kind+" ended", "phase", st.Phase, "message", st.Message)
		return 0, nil
	}
	o.prev = st
	s.rollbacks.set(target, o)
	return max(requeue, minRequeue), nil
}
