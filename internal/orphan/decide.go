package orphan

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// holderRef names the holder of a lock: the holder and the UID it records.
type holderRef struct {
	Holder string
	UID    types.UID
}

func holderOf(rec *rollout.Record) holderRef {
	return holderRef{Holder: rec.Holder, UID: rec.HolderUID}
}

// lookup is what the controller's cache says of the object a lock's holder names.
type lookup struct {
	// Watched: the holder names an object in the controller's scope (PREFIX + NS/NAME, NS
	// watched), so its absence from the cache means it is gone.
	Watched bool
	// Found: an object of that name exists, of UID UID.
	Found bool
	UID   types.UID
}

// action is what the worker does with a target.
type action int

const (
	// leave: the target's lock is not, or no longer, a deleted object's: leave it.
	leave action = iota
	// rollBack: take the next step of the rollback of the deleted object's rollout.
	rollBack
)

// decide decides whether the rollout rec (nil when the workload records none) still holds the
// workload for seen, an object of kind that no longer exists (obj: what the cache says of the
// object of that name), and says why in words. The scan asks with the lock's own holder as seen;
// the worker asks again before every step, with the holder the scan found, so that a rollback
// goes on only while the lock is the one it began on: still holding the workload, still for that
// holder, and that holder still gone.
func decide(rec *rollout.Record, seen holderRef, obj lookup, kind string) (action, string) {
	name := func() string { _, n, _ := strings.Cut(rec.Holder, ":"); return n }
	switch {
	case rec == nil:
		return leave, "the workload records no rollout any longer"
	case !rec.Active():
		return leave, fmt.Sprintf("rollout %s ended (%s)", rec.RolloutID, rec.Phase)
	case holderOf(rec) != seen:
		return leave, fmt.Sprintf("rollout %s is held by %s (UID %q) now", rec.RolloutID, rec.Holder, rec.HolderUID)
	case !obj.Watched:
		// Not an object this controller watches (another namespace, or a holder none of ours
		// writes): its absence from the cache says nothing.
		return leave, fmt.Sprintf("%s names no %s this controller watches", rec.Holder, kind)
	case !obj.Found:
		return rollBack, fmt.Sprintf("%s %s no longer exists", kind, name())
	case rec.HeldBy(rec.Holder, obj.UID):
		return leave, fmt.Sprintf("%s %s exists", kind, name())
	}
	return rollBack, fmt.Sprintf("%s %s (UID %s) was deleted; the %s of that name now is another (UID %s)",
		kind, name(), rec.HolderUID, kind, obj.UID)
}

// rollback is the rollback of one deleted object's rollout under way.
type rollback struct {
	seen holderRef
	// prev is the status of the last step.
	prev rollout.Status
	// started: the rollback's start was logged.
	started bool
}

// rollbacks are the rollbacks under way, by target: the scan adds one, the worker drops it once
// it ended or is no longer a deleted object's.
type rollbacks struct {
	mu sync.Mutex
	m  map[rollout.Ref]*rollback
}

// add records the rollback of target's lock for seen, unless one of target is under way.
func (o *rollbacks) add(target rollout.Ref, seen holderRef) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[target]; ok {
		return false
	}
	if o.m == nil {
		o.m = map[rollout.Ref]*rollback{}
	}
	o.m[target] = &rollback{seen: seen}
	return true
}

// get is a copy of target's rollback, for one worker at a time (the queue hands a target to one).
func (o *rollbacks) get(target rollout.Ref) (rollback, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.m[target]
	if !ok {
		return rollback{}, false
	}
	return *r, true
}

func (o *rollbacks) set(target rollout.Ref, r rollback) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[target] = &r
}

func (o *rollbacks) drop(target rollout.Ref) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, target)
}
