package v1alpha1

// Annotations a person (or a script) sets on an InPlaceRollout object, or on a CustomRun, to act
// on its rollout: the same operations as the CLI's resume and rollback.
const (
	// AcceptBatchAnnotation accepts the batch it names (1-based, as the status's analysis
	// says) when the rollout is paused on that batch's inconclusive analysis: the rollout goes
	// on. A value naming another batch accepts nothing, so a late accept never accepts a later
	// pause; on an InPlaceRollout object, inplace-rollout controller removes the annotation once
	// it names no paused batch.
	AcceptBatchAnnotation = "inplace-rollout.io/accept-batch"
	// AbortAnnotation, "true" on an InPlaceRollout object, rolls its rollout in flight back and
	// keeps the controller from starting another until the annotation is removed and the spec
	// changes.
	AbortAnnotation = "inplace-rollout.io/abort"
	// TemplateAnnotation, "true" on an InPlaceRollout object, makes it a spec that Tekton
	// CustomRuns reference by name and nothing more: inplace-rollout controller does not run it.
	TemplateAnnotation = "inplace-rollout.io/template"
)
