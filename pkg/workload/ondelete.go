package workload

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// onDelete is what StatefulSets and DaemonSets share: the OnDelete update strategy freezes
// them, and their template gets the new images up front so that the controller computes the
// revision updated pods are labelled with.
type onDelete struct {
	ref          Ref
	lock         *Lock
	template     *corev1.PodTemplateSpec
	strategy     any    // the object's spec.updateStrategy
	onDeleteType string // the kind's OnDelete strategy type
	// observed is the object's version as loaded, what every write is conditional on.
	observed objectVersion
	// write sends a patch of the object with opts; read gets its version now.
	write func(ctx context.Context, pt types.PatchType, patch []byte, opts metav1.PatchOptions) error
	read  func(ctx context.Context) (objectVersion, error)
	// dryRun is the dryRun every write is sent with (DryRun).
	dryRun []string
}

// send writes a patch of the object, as a dry run when DryRun marked it.
func (o *onDelete) send(ctx context.Context, pt types.PatchType, patch []byte) error {
	return o.write(ctx, pt, patch, metav1.PatchOptions{DryRun: o.dryRun})
}

func (o *onDelete) setDryRun() { o.dryRun = []string{metav1.DryRunAll} }

func (o *onDelete) Ref() Ref    { return o.ref }
func (o *onDelete) Lock() *Lock { return o.lock }

// previous is what the lock recorded to hand the workload back: none without a lock.
func (o *onDelete) previous() *Lock {
	if o.lock == nil {
		return &Lock{}
	}
	return o.lock
}
func (o *onDelete) Template() *corev1.PodTemplateSpec { return o.template }

func (o *onDelete) patch(ctx context.Context, p objectPatch) error {
	if err := writeIfUnchanged(ctx, o.observed, p, o.read, o.send); err != nil {
		return fmt.Errorf("writing %s: %w", o.ref, err)
	}
	return nil
}

// Previous records the template's images and resources of the rollout's containers and the
// update strategy.
func (o *onDelete) Previous(ch Change) (Change, json.RawMessage) {
	return TemplateChange(o.template, ch), strategyJSON(o.strategy)
}

// Start freezes with OnDelete: the controller then never deletes a pod for its revision, and
// recreates a deleted pod from the new template.
func (o *onDelete) Start(ctx context.Context, record string, ch Change) error {
	return o.patch(ctx, objectPatch{lock: record, spec: map[string]any{
		"updateStrategy": map[string]any{"type": o.onDeleteType, "rollingUpdate": nil},
		"template":       templatePatch(o.template, ch),
	}})
}

func (o *onDelete) Retarget(ctx context.Context, record string, ch Change) error {
	return o.patch(ctx, objectPatch{lock: record, spec: map[string]any{"template": templatePatch(o.template, ch)}})
}

func (o *onDelete) SetLock(ctx context.Context, record string) error {
	if err := writeLock(ctx, o.ref, o.observed, record, o.read, o.send); err != nil {
		return fmt.Errorf("writing %s: %w", o.ref, err)
	}
	return nil
}

func (o *onDelete) Finalize(ctx context.Context, record string, ch Change) (bool, error) {
	return o.handBack(ctx, record, ch)
}

// Restore puts back the previous images and resources, unless someone else changed the template
// during the rollout and restoreForeign is false: then their template stays, and only the
// strategy returns.
func (o *onDelete) Restore(ctx context.Context, record string, ch Change, restoreForeign bool) (bool, error) {
	previous := o.previous().PreviousChange()
	if !restoreForeign && !TemplateHas(o.template, ch) {
		previous = Change{}
	}
	return o.handBack(ctx, record, previous)
}

// handBack puts the template images and resources and the original strategy in one write, so the
// controller never sees the original strategy with pods at a revision other than the template's.
func (o *onDelete) handBack(ctx context.Context, record string, ch Change) (bool, error) {
	strategy, err := restoreStrategy(o.previous().PreviousStrategy)
	if err != nil {
		return false, err
	}
	return true, o.patch(ctx, objectPatch{lock: record, spec: map[string]any{
		"updateStrategy": strategy,
		"template":       templatePatch(o.template, ch),
	}})
}
