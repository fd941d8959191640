package rollout

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Record is a workload's rollout as its lock records it, as much as a driver reads: who holds
// it, which rollout, and where it is. Two Records are equal (==) when their locks say the same,
// to the last field: a driver that knows how a rollout ended knows that it still stands while a
// new read is equal to the one it made then.
type Record struct {
	// Target is the workload.
	Target Ref
	// Holder names who runs the rollout (Spec.Holder); HolderUID the object it names, when it
	// names one and the lock records it.
	Holder    string
	HolderUID types.UID
	// RolloutID is the rollout; SpecHash the Spec.Hash of its spec.
	RolloutID string
	SpecHash  string
	// Phase is where the rollout is: a phase of Status, or PhaseHalted.
	Phase Phase
	// Reason and Message say why the rollout is rolling back, rolled back, paused or halted: as
	// a code (empty in locks that predate codes) and in words.
	Reason  Reason
	Message string
	// lock is the lock, encoded: what makes two Records equal.
	lock string
}

// Active reports whether the rollout still holds the workload: in progress, paused, holding,
// rolling back or halted. A nil Record holds nothing.
func (r *Record) Active() bool {
	switch {
	case r == nil:
		return false
	case r.Phase == PhaseProgressing, r.Phase == PhasePaused, r.Phase == PhaseHolding, r.Phase == PhaseRollingBack, r.Phase == PhaseHalted:
		return true
	}
	return false
}

// HeldBy reports whether the rollout is holder's, the object of that name with UID uid. A
// Record or a caller without a UID is judged by the name alone; an object of the holder's name
// with another UID is another holder (the one that started the rollout was deleted).
func (r *Record) HeldBy(holder string, uid types.UID) bool {
	return r.Holder == holder && (r.HolderUID == "" || uid == "" || r.HolderUID == uid)
}

// recordOf is the Record of lock, the lock of target; nil for none.
func recordOf(target Ref, lock *workload.Lock) *Record {
	if lock == nil {
		return nil
	}
	encoded, err := json.Marshal(lock)
	if err != nil {
		// Only JSON fields that are not JSON fail to encode, and a lock read was decoded from JSON;
		// a lock made otherwise still compares by its content.
		encoded = fmt.Appendf(nil, "%+v", *lock)
	}
	return &Record{Target: target, Holder: lock.Holder, HolderUID: lock.HolderUID, RolloutID: lock.RolloutID, SpecHash: lock.SpecHash,
		Phase: recordPhase(lock.Phase), Reason: Reason(lock.ReasonCode), Message: lock.Reason, lock: string(encoded)}
}

// recordPhase is the phase of a lock's phase. Every lock phase is a Phase of the same name:
// Halted is the one Status never reports (it says Failed, reason TemplateChanged). A lock that
// cannot be read is refused when it is read, so no other phase reaches here.
func recordPhase(lockPhase string) Phase {
	switch lockPhase {
	case workload.LockProgressing:
		return PhaseProgressing
	case workload.LockPaused:
		return PhasePaused
	case workload.LockHolding:
		return PhaseHolding
	case workload.LockRollingBack:
		return PhaseRollingBack
	case workload.LockSucceeded:
		return PhaseSucceeded
	case workload.LockRolledBack:
		return PhaseRolledBack
	case workload.LockHalted:
		return PhaseHalted
	case workload.LockReleased:
		return PhaseReleased
	}
	return Phase(lockPhase)
}

// Record reads the rollout recorded on the workload ref, nil when it has none, with one GET (of
// the workload, or of the ConfigMap holding a pod selector's lock): no pods, no writes. A driver
// that already knows how a rollout ended confirms with it that the cluster still says so. Errors
// of type *InvalidError are bad input (no such workload).
func (e *Engine) Record(ctx context.Context, ref Ref) (*Record, error) {
	lock, err := workload.ReadLock(ctx, e.Client, ref)
	if err != nil {
		return nil, err
	}
	return recordOf(ref, lock), nil
}

// ListRecords lists the rollouts that still hold a workload (Record.Active) in namespace (every
// namespace when it is empty) and whose holder starts with holderPrefix: how a driver finds the
// rollouts of holders that no longer exist. The lists come from the API server's watch cache,
// since a driver runs this periodically over the whole cluster. A lock that cannot be read is
// left out and reported in the error, joined, after the others are listed.
func (e *Engine) ListRecords(ctx context.Context, namespace, holderPrefix string) ([]Record, error) {
	locks, err := workload.ListLocks(ctx, e.Client, namespace, holderPrefix)
	out := make([]Record, 0, len(locks))
	for _, h := range locks {
		out = append(out, *recordOf(h.Ref, h.Lock))
	}
	return out, err
}
