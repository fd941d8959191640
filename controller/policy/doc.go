// Package policy is inplace-rollout controller's reconciler of the StatefulSets and DaemonSets
// that name an InPlaceRolloutPolicy (annotation inplace-rollout.io/policy): whenever a
// workload's pods run an older revision of its template than the one its owner (a GitOps tool)
// applied, it rolls them out in place to that revision through pkg/rollout's engine, holder
// policy:NS/NAME, in batches, with the policy's analysis, and back when a batch fails. The
// workload's spec is never written (the engine's TemplateOwned mode, workload.Owned): the pods
// get the template's images, revision labels, and the labels and annotations the revision
// changed, so the workload's own status counts them. A revision that changes any other field is
// said not to be in place, and nothing is changed. A revision that rolled back is remembered
// in the policy's status and not tried again until the template changes.
//
// Like controller/inplacerollout, it is built on client-go (shared informers and a
// rate-limited work queue): every decision is made from the objects alone (decide), and every
// write carries the resourceVersion it observed.
package policy
