// Package customrun is the Tekton custom task: a controller of tekton.dev/v1beta1 CustomRuns
// whose customRef or customSpec is inplace-rollout.io/v1alpha1 InPlaceRollout. Each run drives one
// rollout through pkg/rollout's engine, holder tekton:NS/NAME, one step per reconcile: its status
// says where the rollout is (extraFields), how it ended (results), and it honours Tekton's
// contract for cancel (roll back, then reason CustomRunCancelled), its own per-attempt timeout
// (roll back, then CustomRunTimedOut) and retries (each attempt starts from the rolled-back
// workload). A PipelineRun's timeouts reach a run as a cancel and end it with CustomRunCancelled,
// the reason Tekton needs to count the run as timed out; its message says which it was.
//
// The controller is built on client-go (a shared informer of Tekton's generated clientset and a
// rate-limited work queue) rather than knative's injection: every status write carries the
// resourceVersion the step observed and a conflict decides again from the fresh run, where the
// generated knative reconciler re-applies the status it computed to whatever it reads back; and
// it needs none of knative's runtime (SYSTEM_NAMESPACE, its ConfigMaps, fixed ports).
package customrun
