package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Record is the record of a rollout on its workload: who runs it, what it changes, where it is,
// and what a rollback puts back. While its phase is Progressing, Paused, Holding, RollingBack or
// Halted the workload belongs to the holder; a finished Record stays as the record of the last
// rollout, for a rollback and for a report. It is stored, as JSON, in the workload's annotation
// workload.LockAnnotation, under the field names below, so that every annotation an earlier
// version wrote reads unchanged.
//
// Equal, not ==, compares two Records: two reads are Equal when their annotations say the same,
// to the last field, so a driver that knows how a rollout ended knows that it still stands while
// a new read is Equal to the one it made then.
type Record struct {
	// Target is the workload; it is not stored, the annotation being on the workload itself.
	Target Ref `json:"-"`
	// Holder names who runs the rollout (Spec.Holder): cli, argo:NS/NAME, tekton:NS/NAME.
	Holder string `json:"holder"`
	// HolderUID is the UID of the object named by Holder (the Argo Rollout, the CustomRun), so
	// that an object deleted and created again under the same name is not taken for the one that
	// started the rollout. Empty for the CLI, and in records written before it existed.
	HolderUID types.UID `json:"holderUID,omitempty"`
	// RolloutID identifies the rollout on the pods' state annotations.
	RolloutID string `json:"rolloutID"`
	// SpecHash is the Spec.Hash of the rollout's spec.
	SpecHash string `json:"specHash"`
	// Images are the target images by container.
	Images map[string]string `json:"images"`
	// PreviousImages are the template images before the first of the rollouts chained by
	// superseding, by container.
	PreviousImages map[string]string `json:"previousImages"`
	// BeforeImages are the distinct images, by container, that the template and the pods ran
	// when the rollout started (a few per container, bounded): the only images a revert may put
	// back. Records written before this field have none; PreviousImages then stands for them.
	BeforeImages map[string][]string `json:"beforeImages,omitempty"`
	// PreviousStrategy is the workload's update strategy before the rollout, as the workload
	// records it.
	PreviousStrategy json.RawMessage `json:"previousStrategy,omitempty"`
	// Superseded lists the IDs of earlier rollouts this one replaced while they were in flight.
	Superseded []string `json:"superseded,omitempty"`
	// Touched names the pods the rollout, and those it superseded, set out to update, each
	// recorded before its first write, up to maxTouched; TouchedMore counts the pods updated
	// beyond it. A rollback checks them, so that a touched pod it cannot find by its state (the
	// annotation removed, the pod gone to another owner) is reported, not passed over.
	Touched     []TouchedPod `json:"touched,omitempty"`
	TouchedMore int          `json:"touchedMore,omitempty"`
	// Phase is where the rollout is: a phase of Status, or PhaseHalted.
	Phase Phase `json:"phase"`
	// Message says why the rollout is rolling back, rolled back, paused or halted, in words;
	// Reason says it as a code (empty in records that predate codes).
	Message string `json:"reason,omitempty"`
	Reason  Reason `json:"reasonCode,omitempty"`
	// StartedAt is when the rollout started.
	StartedAt time.Time `json:"startedAt"`
	// ProgressAt is when the rollout last moved on in a way no pod records: a batch passed its
	// analysis, or was accepted after a pause. A batch whose pods make no progress fails its
	// deadline counted from the latest of this, StartedAt and the pods' stage times.
	ProgressAt time.Time `json:"progressAt,omitzero"`
	// AcceptedPods is the updated pod count up to which batches passed their analysis (or were
	// accepted after an inconclusive one). A count, not a batch index, so that a changed batch
	// list, a hold point or a scale changes which batch is next but never repeats or skips an
	// analysis.
	AcceptedPods int `json:"acceptedPods,omitempty"`
	// AcceptedAll says the batch of every pod passed its analysis (or was accepted), so that a
	// workload scaled down below AcceptedPods still has its last batch analysed when it did not.
	AcceptedAll bool `json:"acceptedAll,omitempty"`
	// HeldAt is the hold point, as a pod count, while the phase is Holding.
	HeldAt int `json:"heldAt,omitempty"`
	// Analysis is the state of the analysis in progress or last finished, as the analysis
	// package encodes it.
	Analysis json.RawMessage `json:"analysis,omitempty"`
	// stored is the annotation the Record was read from: what makes two reads Equal.
	stored string
}

// TouchedPod is a pod a rollout set out to update: by name, to report it, and UID, so that a pod
// recreated under the same name is not taken for it.
type TouchedPod struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Equal reports whether two reads of a rollout say the same, to the last field of the
// annotation they were read from. Two nil Records are Equal.
func (r *Record) Equal(o *Record) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.Target == o.Target && r.stored == o.stored
}

// Rollouts are the IDs of the rollout and of those it superseded: the rollouts whose pod states
// and puller pods are its own.
func (r *Record) Rollouts() []string {
	return append(slices.Clone(r.Superseded), r.RolloutID)
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

// recordOf is the Record of lock, the lock of target; nil for none. The lock was checked when
// it was read. The two carry the same fields under the same JSON names (TestRecordMirrorsLock),
// field for field.
func recordOf(target Ref, lock *workload.Lock) *Record {
	if lock == nil {
		return nil
	}
	stored, err := json.Marshal(lock)
	if err != nil {
		// Only a raw JSON field that is not JSON fails to encode, and a lock read was decoded
		// from JSON; a lock made otherwise still compares by its content.
		stored = fmt.Appendf(nil, "%#v", *lock)
	}
	r := &Record{Target: target, Holder: lock.Holder, HolderUID: lock.HolderUID, RolloutID: lock.RolloutID, SpecHash: lock.SpecHash,
		Images: lock.Images, PreviousImages: lock.PreviousImages, BeforeImages: lock.BeforeImages, PreviousStrategy: lock.PreviousStrategy,
		Superseded: lock.Superseded, TouchedMore: lock.TouchedMore, Phase: Phase(lock.Phase), Message: lock.Reason, Reason: Reason(lock.ReasonCode),
		StartedAt: lock.StartedAt, ProgressAt: lock.ProgressAt, AcceptedPods: lock.AcceptedPods, AcceptedAll: lock.AcceptedAll, HeldAt: lock.HeldAt,
		Analysis: lock.Analysis, stored: string(stored)}
	for _, t := range lock.Touched {
		r.Touched = append(r.Touched, TouchedPod{Name: t.Name, UID: t.UID})
	}
	return r
}

// lock is the lock that records r, for the workload to write.
func (r *Record) lock() *workload.Lock {
	l := &workload.Lock{Holder: r.Holder, HolderUID: r.HolderUID, RolloutID: r.RolloutID, SpecHash: r.SpecHash,
		Images: r.Images, PreviousImages: r.PreviousImages, BeforeImages: r.BeforeImages, PreviousStrategy: r.PreviousStrategy,
		Superseded: r.Superseded, TouchedMore: r.TouchedMore, Phase: string(r.Phase), Reason: r.Message, ReasonCode: string(r.Reason),
		StartedAt: r.StartedAt, ProgressAt: r.ProgressAt, AcceptedPods: r.AcceptedPods, AcceptedAll: r.AcceptedAll, HeldAt: r.HeldAt,
		Analysis: r.Analysis}
	for _, t := range r.Touched {
		l.Touched = append(l.Touched, workload.TouchedPod{Name: t.Name, UID: t.UID})
	}
	return l
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
