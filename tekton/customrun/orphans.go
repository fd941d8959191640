package customrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// A CustomRun deleted in flight rolls its rollout back first, held by Finalizer. A run whose
// finalizer was removed by hand, or that was force-deleted, leaves its workload held by a holder
// nobody drives any longer: the scan finds such locks and rolls them back, at the pace of the
// defaults since the run's own spec went with it.

// orphanSettle is how long the scan waits after a CustomRun of ours is deleted: the runs of a
// PipelineRun, or of a namespace, go together, and one scan then sees all of them gone.
const orphanSettle = 2 * time.Second

// holderRef names the holder of a lock: the holder and the UID it records.
type holderRef struct {
	Holder string
	UID    types.UID
}

func holderOf(rec *rollout.Record) holderRef {
	return holderRef{Holder: rec.Holder, UID: rec.HolderUID}
}

// runLookup is what the controller's CustomRun cache says of the run a lock's holder names.
type runLookup struct {
	// Watched: the holder names a CustomRun in the controller's scope (tekton:NS/NAME, NS
	// watched), so its absence from the cache means it is gone.
	Watched bool
	// Found: a CustomRun of that name exists, of UID UID.
	Found bool
	UID   types.UID
}

// orphanAction is what the orphan worker does with a target.
type orphanAction int

const (
	// orphanLeave: the target's lock is not, or no longer, a deleted run's: leave it.
	orphanLeave orphanAction = iota
	// orphanRollBack: take the next step of the rollback of the deleted run's rollout.
	orphanRollBack
)

// decideOrphan decides whether the rollout rec (nil when the workload records none) still holds
// the workload for seen, a CustomRun that no longer exists (run: what the cache says of the run
// of that name), and says why in words. The scan asks with the lock's own holder as seen; the worker
// asks again before every step, with the holder the scan found, so that a rollback goes on only
// while the lock is the one it began on: still holding the workload, still for that holder, and
// that holder still gone.
func decideOrphan(rec *rollout.Record, seen holderRef, run runLookup) (orphanAction, string) {
	switch {
	case rec == nil:
		return orphanLeave, "the workload records no rollout any longer"
	case !rec.Active():
		return orphanLeave, fmt.Sprintf("rollout %s ended (%s)", rec.RolloutID, rec.Phase)
	case holderOf(rec) != seen:
		return orphanLeave, fmt.Sprintf("rollout %s is held by %s (UID %q) now", rec.RolloutID, rec.Holder, rec.HolderUID)
	case !run.Watched:
		// Not a run this controller watches (another namespace, or a holder no run of ours
		// writes): its absence from the cache says nothing.
		return orphanLeave, fmt.Sprintf("%s names no CustomRun this controller watches", rec.Holder)
	case !run.Found:
		return orphanRollBack, fmt.Sprintf("CustomRun %s no longer exists", strings.TrimPrefix(rec.Holder, HolderPrefix))
	case rec.HeldBy(rec.Holder, run.UID):
		return orphanLeave, fmt.Sprintf("CustomRun %s exists", strings.TrimPrefix(rec.Holder, HolderPrefix))
	}
	return orphanRollBack, fmt.Sprintf("CustomRun %s (UID %s) was deleted; the run of that name now is another (UID %s)",
		strings.TrimPrefix(rec.Holder, HolderPrefix), rec.HolderUID, run.UID)
}

// orphan is the rollback of one deleted run's rollout under way.
type orphan struct {
	seen holderRef
	// prev is the status of the last step.
	prev rollout.Status
	// started: the rollback's start was logged.
	started bool
}

// orphans are the rollbacks under way, by target: the scan adds one, the worker drops it once
// it ended or is no longer a deleted run's.
type orphans struct {
	mu sync.Mutex
	m  map[rollout.Ref]*orphan
}

// add records the rollback of target's lock for seen, unless one of target is under way.
func (o *orphans) add(target rollout.Ref, seen holderRef) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[target]; ok {
		return false
	}
	if o.m == nil {
		o.m = map[rollout.Ref]*orphan{}
	}
	o.m[target] = &orphan{seen: seen}
	return true
}

// get is a copy of target's rollback, for one worker at a time (the queue hands a target to one).
func (o *orphans) get(target rollout.Ref) (orphan, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.m[target]
	if !ok {
		return orphan{}, false
	}
	return *r, true
}

func (o *orphans) set(target rollout.Ref, r orphan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[target] = &r
}

func (o *orphans) drop(target rollout.Ref) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, target)
}

// runDeleted asks for a scan when a run of ours is deleted: without its finalizer (removed by
// hand, or force-deleted) its rollout is left to the scan.
func (c *Controller) runDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if run, ok := obj.(*v1beta1.CustomRun); !ok || !ours(run) {
		return
	}
	select {
	case c.deleted <- struct{}{}:
	default:
		// A scan is due already; it sees every deletion so far.
	}
}

// scanLoop scans at once, at every resync of the runs, and shortly after a run of ours is
// deleted, until ctx ends.
func (c *Controller) scanLoop(ctx context.Context) {
	tick := time.NewTicker(c.scanEvery)
	defer tick.Stop()
	for {
		c.scanOrphans(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.deleted:
			select {
			case <-ctx.Done():
				return
			case <-time.After(orphanSettle):
			}
		}
	}
}

// scanOrphans queues the rollback of every lock, in the controller's scope, of a CustomRun that
// no longer exists, and returns how many it queued. The locks are listed before the runs are
// looked up: a lock listed was written for a run this process's cache lists (it watched the
// runs before it led, and only the leader writes locks), unless the run was deleted since.
func (c *Controller) scanOrphans(ctx context.Context) int {
	recs, err := c.reconciler.Engine.ListRecords(ctx, c.namespace, HolderPrefix)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("listing the workloads held for CustomRuns, to find those of deleted runs", "namespace", c.namespace, "err", err)
	}
	queued := 0
	for i := range recs {
		rec := &recs[i]
		if action, _ := decideOrphan(rec, holderOf(rec), c.lookup(rec.Holder)); action == orphanRollBack && c.orphans.add(rec.Target, holderOf(rec)) {
			c.orphanQueue.Add(rec.Target)
			queued++
		}
	}
	return queued
}

// lookup says what the cache holds of the run holder names.
func (c *Controller) lookup(holder string) runLookup {
	ns, name, ok := strings.Cut(strings.TrimPrefix(holder, HolderPrefix), "/")
	if !strings.HasPrefix(holder, HolderPrefix) || !ok || ns == "" || name == "" || c.namespace != "" && ns != c.namespace {
		return runLookup{}
	}
	run, err := c.lister.CustomRuns(ns).Get(name)
	if err != nil {
		// The lister's only error is NotFound.
		return runLookup{Watched: true}
	}
	return runLookup{Watched: true, Found: true, UID: run.UID}
}

// nextOrphan takes the next step of the next rollback of the orphan queue; false once the queue
// shut down.
func (c *Controller) nextOrphan(ctx context.Context) bool {
	target, quit := c.orphanQueue.Get()
	if quit {
		return false
	}
	defer c.orphanQueue.Done(target)
	if ctx.Err() != nil {
		// Stopping, or the Lease lost: no step more (next).
		return false
	}
	o, ok := c.orphans.get(target)
	if !ok {
		c.orphanQueue.Forget(target)
		return true
	}
	requeue, err := c.stepOrphan(ctx, target, o)
	switch {
	case err != nil:
		c.log.With(rollout.LogAttrs(target)...).Warn("rollback step of a deleted CustomRun's rollout failed, retrying", "holder", o.seen.Holder, "err", err)
		c.orphanQueue.AddRateLimited(target)
	case requeue > 0:
		c.orphanQueue.Forget(target)
		c.orphanQueue.AddAfter(target, requeue)
	default:
		c.orphanQueue.Forget(target)
		c.orphans.drop(target)
	}
	return true
}

// stepOrphan takes one step of the rollback of the rollout o.seen left on target, when the lock
// still says so, and returns when to take the next (0: the rollback is over, or not to be
// taken). A returned error is worth a retry.
func (c *Controller) stepOrphan(ctx context.Context, target rollout.Ref, o orphan) (time.Duration, error) {
	e := c.reconciler.Engine
	log := c.log.With(append([]any{"holder", o.seen.Holder, "holderUID", o.seen.UID}, rollout.LogAttrs(target)...)...)
	rec, err := e.Record(ctx, target)
	switch {
	case err != nil && rollout.OutcomeOf(rollout.Status{}, err).Kind == rollout.BadInput:
		log.Info("not rolling back the rollout of a deleted CustomRun: its workload is gone", "err", err)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the rollout lock of %s: %w", target, err)
	}
	action, why := decideOrphan(rec, o.seen, c.lookup(o.seen.Holder))
	if action == orphanLeave {
		log.Info("not rolling back the rollout of a deleted CustomRun", "why", why)
		return 0, nil
	}
	log = log.With("rolloutID", rec.RolloutID)
	if !o.started {
		log.Warn("rolling back the rollout of a deleted CustomRun", "phase", rec.Phase, "why", why)
		o.started = true
	}
	// The run's own pace went with its spec: one pod at a time, within the default deadline.
	rb := rollout.RollbackSpec{Target: target, Holder: o.seen.Holder, HolderUID: o.seen.UID,
		MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}
	st, requeue, err := e.Abort(context.WithoutCancel(ctx), rb, o.prev)
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		c.orphans.set(target, o)
		return 0, fmt.Errorf("rolling back %s, left by %s: %w", target, o.seen.Holder, err)
	case rollout.BadInput:
		// The lock changed between the read and the step (another holder's now, say).
		log.Info("not rolling back the rollout of a deleted CustomRun", "why", err.Error())
		return 0, nil
	case rollout.Refused, rollout.Blocked, rollout.Superseded:
		// The next scan finds the lock again if it still holds the workload for nobody.
		log.Error("the rollback of a deleted CustomRun's rollout stopped; a person must look", "err", err)
		return 0, nil
	case rollout.RolledBack:
		log.Info("rolled back the rollout of a deleted CustomRun", "rolledBack", st.RolledBack, "message", st.Message)
		return 0, nil
	case rollout.NeedsPerson:
		log.Error("the rollback of a deleted CustomRun's rollout is incomplete; a person must look", "reason", st.Reason, "message", st.Message)
		return 0, nil
	case rollout.Succeeded:
		log.Info("the rollout of a deleted CustomRun ended", "phase", st.Phase, "message", st.Message)
		return 0, nil
	}
	o.prev = st
	c.orphans.set(target, o)
	return max(requeue, minRequeue), nil
}
