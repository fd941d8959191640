// Package tekton is for the catalog-style Task, the CustomRun controller for
// inplace-rollout.io/v1alpha1 InPlaceRollout, and the Tekton results writer. It holds no code
// yet; the command's --results-dir already writes Tekton-style result files.
package tekton
