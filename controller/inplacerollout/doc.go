// Package inplacerollout is inplace-rollout controller's reconciler of InPlaceRollout objects
// (inplace-rollout.io/v1alpha1): each object drives one rollout through pkg/rollout's engine,
// holder inplacerollout:NS/NAME, one step per reconcile, and its status subresource says where
// the rollout is (phase, reason, batch, counts, the last analysis verdict, observedGeneration,
// and conditions that `kubectl wait` and kstatus read). A new spec supersedes the rollout in
// flight; a deleted object rolls its rollout back first (a finalizer holds it); annotations
// accept a paused batch and abort. An object annotated as a template is a spec for Tekton
// CustomRuns and is left alone.
//
// Like tekton/customrun, it is built on client-go (a dynamic shared informer and a rate-limited
// work queue): every decision is made from the object alone (decide), and every write carries
// the resourceVersion it observed, so a conflict decides again from the fresh object.
package inplacerollout
