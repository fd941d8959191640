package rollout

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// maxReleaseAttempts bounds Release's retries on a conflict: each one observes afresh.
const maxReleaseAttempts = 5

// releaseAction is what Release does with a workload's lock.
type releaseAction int

const (
	// releaseNone: the holder has no rollout holding the workload; nothing is written.
	releaseNone releaseAction = iota
	// releaseDone: the holder's rollout was released before; nothing is written.
	releaseDone
	// releaseWait: pods are mid-update; nothing is written until they finish.
	releaseWait
	// releaseRefuse: the rollout is rolling back, which goes on.
	releaseRefuse
	// releaseNow: hand the workload back as it is.
	releaseNow
)

// decideRelease decides what Release does with lock for holder, while inflight of the rollout's
// pods are mid-update, and says why in words.
func decideRelease(lock *workload.Lock, holder string, inflight int) (releaseAction, string) {
	switch {
	case lock == nil:
		return releaseNone, "no in-place rollout is recorded; nothing to release"
	case lock.Holder != holder:
		return releaseNone, fmt.Sprintf("rollout %s is %s's, not %s's; nothing to release", lock.RolloutID, lock.Holder, holder)
	case lock.Phase == workload.LockReleased:
		return releaseDone, fmt.Sprintf("rollout %s is already released", lock.RolloutID)
	case !lock.Active():
		return releaseNone, fmt.Sprintf("rollout %s is %s; nothing to release", lock.RolloutID, lock.Phase)
	case lock.Phase == workload.LockRollingBack:
		return releaseRefuse, fmt.Sprintf("rollout %s is rolling back (%s); the rollback goes on, and the workload is handed back when it ends", lock.RolloutID, lock.Reason)
	case inflight > 0:
		// Released now, they would stay mid-update (a drained pod out of its Service for good)
		// and stop the next rollout at them.
		return releaseWait, fmt.Sprintf("%d pods of rollout %s are mid-update; they finish before the workload is released", inflight, lock.RolloutID)
	}
	return releaseNow, ""
}

// Release lets go of holder's rollout of target where it is, as Argo's full promotion does to a
// step still running: no pod is touched, and one write (with the resourceVersion observed,
// observed afresh and tried again on a conflict) hands the workload back as it is. Its update
// strategy returns, its template stays (for a StatefulSet or DaemonSet, the rollout's images,
// which the updated pods' revision labels match; for a Deployment, the previous images, which
// its ReplicaSet still has), and the lock is marked Released. The workload's controller then
// takes it from there in its own way, and a later rollout starts as after any other.
//
// The status says what happened: phase Released (now or before); phase Progressing with
// Updating above 0 when pods are mid-update, with nothing written (drive the rollout with a hold
// point of 1, which starts no more pods, until it settles, then release); no phase when the holder has
// nothing to release. A rollout rolling back is an *InvalidError: its rollback goes on. Other
// errors are typed as Reconcile's are.
func (e *Engine) Release(ctx context.Context, target workload.Ref, holder string) (Status, error) {
	st, err := e.release(ctx, target, holder)
	return st, classify(err, st)
}

func (e *Engine) release(ctx context.Context, target workload.Ref, holder string) (Status, error) {
	if err := checkTarget(target); err != nil {
		return Status{}, err
	}
	for attempt := 1; ; attempt++ {
		w, err := workload.Load(ctx, e.Client, target)
		if err != nil {
			return Status{}, asInvalid(err)
		}
		lock := w.Lock()
		st := Status{Total: w.Replicas()}
		if lock != nil {
			st.RolloutID = lock.RolloutID
			st.Updated, st.Updating = releaseCounts(w, lock)
		}
		action, msg := decideRelease(lock, holder, st.Updating)
		st.Message = msg
		switch action {
		case releaseNone:
			return st, nil
		case releaseDone:
			st.Phase = PhaseReleased
			return st, nil
		case releaseWait:
			st.Phase = PhaseProgressing
			return st, nil
		case releaseRefuse:
			return st, invalid("%s: %s", w.Ref(), msg)
		}
		// Puller pods never outlive the rollout.
		if _, err := e.removePullers(ctx, w.Ref().Namespace, lock.Rollouts()); err != nil {
			return st, err
		}
		next := *lock
		next.Reason, next.ReasonCode = "released by "+holder, ""
		err = w.Release(ctx, &next)
		if apierrors.IsConflict(err) && attempt < maxReleaseAttempts {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("releasing rollout %s: %w", lock.RolloutID, err)
		}
		e.logFor(w.Ref(), lock.RolloutID).Info("released", "holder", holder, "updated", st.Updated, "total", st.Total)
		st.Phase = PhaseReleased
		st.Message = fmt.Sprintf("rollout %s released with %d/%d pods updated; %s has its update strategy back, and its template and pods are left as they are",
			lock.RolloutID, st.Updated, st.Total, w.Ref())
		return st, nil
	}
}

// releaseCounts counts the workload's pods that the rollout updated, and those it (or one it
// superseded) has mid-update. A pod whose state cannot be read is neither: Release touches no
// pod.
func releaseCounts(w workload.Workload, lock *workload.Lock) (updated, inflight int) {
	ours := lock.Rollouts()
	for _, p := range w.Pods() {
		s, err := inplace.ReadState(p)
		if err != nil || s == nil || !slices.Contains(ours, s.RolloutID) {
			continue
		}
		switch {
		case s.Stage == inplace.StageUpdated && s.RolloutID == lock.RolloutID:
			updated++
		case !s.Stage.Terminal():
			inflight++
		}
	}
	return updated, inflight
}
