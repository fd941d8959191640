package workload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// onDelete is what StatefulSets and DaemonSets share: the OnDelete update strategy freezes
// them, and their template gets the new images up front so that the controller computes the
// revision updated pods are labelled with.
type onDelete struct {
	ref             Ref
	lock            *Lock
	template        *corev1.PodTemplateSpec
	strategy        any    // the object's spec.updateStrategy
	onDeleteType    string // the kind's OnDelete strategy type
	resourceVersion string
	// observed is the object's version as loaded, for lock-only writes (see writeLock).
	observed objectVersion
	// write sends a strategic-merge patch of the object; read gets its version now.
	write func(ctx context.Context, patch []byte) error
	read  func(ctx context.Context) (objectVersion, error)
}

func (o *onDelete) Ref() Ref                          { return o.ref }
func (o *onDelete) Lock() *Lock                       { return o.lock }
func (o *onDelete) Template() *corev1.PodTemplateSpec { return o.template }

func (o *onDelete) patch(ctx context.Context, p objectPatch) error {
	p.resourceVersion = o.resourceVersion
	if err := o.write(ctx, p.bytes()); err != nil {
		return fmt.Errorf("writing %s: %w", o.ref, err)
	}
	return nil
}

// Start freezes with OnDelete: the controller then never deletes a pod for its revision, and
// recreates a deleted pod from the new template.
func (o *onDelete) Start(ctx context.Context, lock *Lock) error {
	if lock.PreviousImages == nil {
		lock.PreviousImages = TemplateImages(o.template, lock.Images)
		lock.PreviousStrategy = strategyJSON(o.strategy)
	}
	return o.patch(ctx, objectPatch{lock: lock, spec: map[string]any{
		"updateStrategy": map[string]any{"type": o.onDeleteType, "rollingUpdate": nil},
		"template":       templatePatch(o.template, lock.Images),
	}})
}

func (o *onDelete) Retarget(ctx context.Context, lock *Lock) error {
	return o.patch(ctx, objectPatch{lock: lock, spec: map[string]any{"template": templatePatch(o.template, lock.Images)}})
}

func (o *onDelete) SetLock(ctx context.Context, lock *Lock) error {
	if err := writeLock(ctx, o.observed, objectPatch{lock: lock}, o.read, o.write); err != nil {
		return fmt.Errorf("writing %s: %w", o.ref, err)
	}
	return nil
}

func (o *onDelete) Finalize(ctx context.Context, lock *Lock) (bool, error) {
	return o.handBack(ctx, lock, lock.Images, LockSucceeded)
}

// Restore puts back the previous images, unless someone else changed the template during the
// rollout and restoreForeign is false: then their template stays, and only the strategy returns.
func (o *onDelete) Restore(ctx context.Context, lock *Lock, restoreForeign bool) (bool, error) {
	images := lock.PreviousImages
	if !restoreForeign && !TemplateHasImages(o.template, lock.Images) {
		images = nil
	}
	return o.handBack(ctx, lock, images, LockRolledBack)
}

// handBack puts the template images and the original strategy in one write, so the controller
// never sees the original strategy with pods at a revision other than the template's.
func (o *onDelete) handBack(ctx context.Context, lock *Lock, images map[string]string, phase string) (bool, error) {
	if o.lock != nil && o.lock.Phase == phase {
		return true, nil
	}
	strategy, err := restoreStrategy(lock.PreviousStrategy)
	if err != nil {
		return false, err
	}
	lock.Phase = phase
	return true, o.patch(ctx, objectPatch{lock: lock, spec: map[string]any{
		"updateStrategy": strategy,
		"template":       templatePatch(o.template, images),
	}})
}
