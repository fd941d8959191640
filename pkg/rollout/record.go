package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
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
	// Resources are the target resources by container, only the values they name; none for a
	// rollout of images alone.
	Resources map[string]inplace.Resources `json:"resources,omitempty"`
	// PreviousResources are, of the template's resources before the first of the rollouts
	// chained by superseding, the values Resources names, by container: what a rollback puts
	// back in the template. Each pod records its own in its state.
	PreviousResources map[string]inplace.Resources `json:"previousResources,omitempty"`
	// BeforeImages are the distinct images, by container, that the template and the pods ran
	// when the rollout started (a few per container, bounded): the only images a revert may put
	// back. Records written before this field have none; PreviousImages then stands for them.
	BeforeImages map[string][]string `json:"beforeImages,omitempty"`
	// PreviousStrategy is the workload's update strategy before the rollout, as the workload
	// records it.
	PreviousStrategy json.RawMessage `json:"previousStrategy,omitempty"`
	// TemplateOwned says the rollout brings the pods to the workload's own template, its
	// owner's (Spec.TemplateOwned): it writes nothing on the workload but this lock, and a
	// rollback reverts the pods and leaves the template.
	TemplateOwned bool `json:"templateOwned,omitempty"`
	// Labels and Annotations are what a rollout to the owner's template sets on each pod with
	// its images (Spec.Labels, Spec.Annotations), so that its driver asks for the same rollout
	// at every step, whichever pods are still behind.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Superseded lists the IDs of earlier rollouts this one replaced while they were in flight.
	Superseded []string `json:"superseded,omitempty"`
	// Touched names the pods the rollout, and those it superseded, set out to update, each
	// recorded before its first write, up to maxTouched; TouchedMore counts the pods set out to
	// update beyond it, also before their first write. A rollback checks them, so that a touched pod it cannot find by its state (the
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
	// Reported is the count of pods updated that the engine reported to its Metrics, with the
	// write of this Record: a pod's update ends with no write of its own.
	Reported int `json:"reported,omitempty"`
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

// recordOf decodes the Record of lock, the lock of target as the workload read it: nil for none.
// A field no version writes (someone edited the annotation) is a *workload.LockError naming the
// object and the field.
func recordOf(target Ref, lock *workload.Lock) (*Record, error) {
	if lock == nil {
		return nil, nil
	}
	r := &Record{Target: target, stored: lock.Record}
	if err := json.Unmarshal([]byte(lock.Record), r); err != nil {
		return nil, workload.LockErrorOf(target, err, true)
	}
	if err := r.check(); err != nil {
		return nil, workload.LockErrorOf(target, err, false)
	}
	return r, nil
}

// load observes the workload ref, its pods and the Record on it (nil for none).
func (e *Engine) load(ctx context.Context, ref Ref) (workload.Workload, *Record, error) {
	w, err := workload.LoadWith(ctx, e.Client, e.Pods, ref)
	if err != nil {
		return nil, nil, err
	}
	r, err := recordOf(w.Ref(), w.Lock())
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", w.Ref(), err)
	}
	if r != nil && r.Active() && r.TemplateOwned {
		// Every step of a rollout to the owner's template, its rollback included, leaves the
		// workload's spec to its owner.
		ow, err := workload.Owned(w)
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", w.Ref(), err)
		}
		w = ow
	}
	return w, r, nil
}

// check refuses a decoded Record that no version writes: an unknown phase, no holder, a negative
// count, an image that is not a reference, resources no rollout sets. Each error names the
// field. The workload checks the fields it reads itself (previousImages, previousResources,
// previousStrategy) when it reads the annotation.
func (r *Record) check() error {
	switch r.Phase {
	case PhaseProgressing, PhasePaused, PhaseRollingBack, PhaseSucceeded, PhaseRolledBack, PhaseHalted, PhaseHolding, PhaseReleased:
	default:
		return fmt.Errorf("phase %q is none of %s, %s, %s, %s, %s, %s, %s, %s", r.Phase,
			PhaseProgressing, PhasePaused, PhaseHolding, PhaseHalted, PhaseRollingBack, PhaseSucceeded, PhaseRolledBack, PhaseReleased)
	}
	if r.Holder == "" {
		return errors.New("holder is empty")
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"acceptedPods", r.AcceptedPods}, {"heldAt", r.HeldAt}, {"touchedMore", r.TouchedMore}, {"reported", r.Reported}} {
		if f.n < 0 {
			return fmt.Errorf("%s is %d, below 0", f.name, f.n)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(r.Images)) {
		if err := workload.CheckLockImage("images", c, r.Images[c]); err != nil {
			return err
		}
	}
	if err := workload.CheckLockResources("resources", r.Resources); err != nil {
		return err
	}
	for _, c := range slices.Sorted(maps.Keys(r.BeforeImages)) {
		for _, img := range r.BeforeImages[c] {
			if err := workload.CheckLockImage("beforeImages", c, img); err != nil {
				return err
			}
		}
	}
	return nil
}

// target is what the rollout sets on the containers: its images and resources.
func (r *Record) target() workload.Change {
	return workload.Change{Images: r.Images, Resources: r.Resources}
}

// previous is what the template had before the rollout, which a rollback puts back.
func (r *Record) previous() workload.Change {
	return workload.Change{Images: r.PreviousImages, Resources: r.PreviousResources}
}

// encode is the annotation that stores r, for the workload to write.
func (r *Record) encode() string {
	data, err := json.Marshal(r)
	if err != nil {
		// Only a raw JSON field that is not JSON fails to encode: the analysis state, which its
		// package encodes, and the previous strategy, which the workload does.
		panic(fmt.Sprintf("encoding the record of rollout %s: %v", r.RolloutID, err))
	}
	return string(data)
}

// Record reads the rollout recorded on the workload ref, nil when it has none, with one GET (of
// the workload, or of the ConfigMap holding a pod selector's lock): no pods, no writes. A driver
// that already knows how a rollout ended confirms with it that the cluster still says so. Errors
// of type *InvalidError are bad input (no such workload).
func (e *Engine) Record(ctx context.Context, ref Ref) (*Record, error) {
	return ReadRecord(ctx, e.Client, ref)
}

// ReadRecord is Engine.Record for a caller with a client and no Engine.
func ReadRecord(ctx context.Context, client kubernetes.Interface, ref Ref) (*Record, error) {
	lock, err := workload.ReadLock(ctx, client, ref)
	if err != nil {
		return nil, err
	}
	return recordOf(ref, lock)
}

// ListRecords lists the rollouts that still hold a workload (Record.Active) in namespace (every
// namespace when it is empty) and whose holder starts with holderPrefix: how a driver finds the
// rollouts of holders that no longer exist. The lists come from the API server's watch cache,
// since a driver runs this periodically over the whole cluster. A lock that cannot be read is
// left out and reported in the error, joined, after the others are listed.
func (e *Engine) ListRecords(ctx context.Context, namespace, holderPrefix string) ([]Record, error) {
	locks, err := workload.ListLocks(ctx, e.Client, namespace)
	errs := []error{err}
	var out []Record
	for _, l := range locks {
		r, err := recordOf(l.Ref, l.Lock)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Active() && strings.HasPrefix(r.Holder, holderPrefix) {
			out = append(out, *r)
		}
	}
	return out, errors.Join(errs...)
}
