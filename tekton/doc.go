// Package tekton holds the catalog-style Task, the CustomRun controller for
// inplace-rollout.io/v1alpha1 InPlaceRollout, and the Tekton results writer.
package tekton
