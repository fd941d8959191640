// Package rollout is the batch engine: a Spec, a small Status, and a level-triggered Reconcile
// that does one bounded step per call (update a batch, wait, analyze, roll back) over
// pkg/workload, pkg/inplace and analysis. It knows nothing of Argo Rollouts or Tekton.
package rollout
