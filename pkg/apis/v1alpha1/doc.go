// Package v1alpha1 is the rollout spec as a versioned document, `apiVersion:
// inplace-rollout.io/v1alpha1`, `kind: InPlaceRollout`: the CLI's `run -f FILE`, the Argo Rollouts
// step plugin's config and the Tekton custom task's spec. It holds the types, their strict
// decoding and their defaults; pkg/rollout converts a spec to the engine's rollout.Spec.
package v1alpha1
