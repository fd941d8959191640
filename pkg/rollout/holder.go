package rollout

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// holderRefusal is the error for a caller that is not the lock's holder and did not ask to take
// it over: what holds it, and that it can be taken over once that holder is gone.
func holderRefusal(w workload.Observed, lock *Record, holder, doing string) error {
	who := lock.Holder
	if lock.Holder == holder {
		// The same name, another object: the one that started the rollout was deleted.
		who = fmt.Sprintf("an earlier %s (UID %s), deleted since", lock.Holder, lock.HolderUID)
	}
	return &InvalidError{Msg: fmt.Sprintf("%s is being rolled out by %s (rollout %s, %s, started %s); only its holder can %s",
		w.Ref(), who, lock.RolloutID, lock.Phase, lock.StartedAt.Format(time.RFC3339), doing), Fix: FixTakeOver}
}

// takeOver makes holder (UID uid) the holder of lock, in one write, and changes nothing else:
// the next step goes on as the new holder's. Only an explicit request does it (Spec.TakeOver,
// RollbackSpec.TakeOver), for a lock whose holder no longer exists.
func (e *Engine) takeOver(ctx context.Context, w workload.Workload, lock *Record, holder string, uid types.UID) (Status, time.Duration, error) {
	next := *lock
	next.Holder, next.HolderUID = holder, uid
	if err := w.SetLock(ctx, next.encode()); err != nil {
		return Status{}, 0, fmt.Errorf("taking over rollout %s from %s: %w", lock.RolloutID, lock.Holder, err)
	}
	e.logFor(w.Ref(), lock.RolloutID).Warn("took the rollout over", "from", lock.Holder, "fromUID", lock.HolderUID, "holder", holder, "phase", lock.Phase)
	st := Status{RolloutID: lock.RolloutID, Total: w.Replicas(), Message: fmt.Sprintf("took rollout %s over from %s", lock.RolloutID, lock.Holder)}
	return st, busyRequeue, nil
}
