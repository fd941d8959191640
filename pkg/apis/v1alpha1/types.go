package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
)

// Group, version and kind of the document.
const (
	Group      = "inplace-rollout.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "InPlaceRollout"
)

// InPlaceRollout is a rollout of new images, or new CPU and memory, to a workload's live pods, in
// place.
type InPlaceRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InPlaceRolloutSpec `json:"spec"`
	// Status is where the rollout is, written by inplace-rollout controller; the other drivers
	// read only the spec.
	Status InPlaceRolloutStatus `json:"status,omitzero"`
}

// InPlaceRolloutStatus is where an InPlaceRollout object's rollout is, the same size whatever the
// number of pods.
type InPlaceRolloutStatus struct {
	// ObservedGeneration is the metadata.generation of the spec this status is about.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is where the rollout is: Progressing, Analyzing, Paused, Holding, Succeeded, RollingBack, RolledBack or Failed.
	Phase string `json:"phase,omitempty"`
	// Reason says why, as a code, when the rollout is paused, rolling back or ended other than by succeeding.
	Reason string `json:"reason,omitempty"`
	// Message says where the rollout is, and what to do when it waits for a person.
	Message string `json:"message,omitempty"`
	// RolloutID names the rollout on the workload's lock and in its Events.
	RolloutID string `json:"rolloutID,omitempty"`
	// Batch is the 1-based batch in progress.
	Batch int32 `json:"batch,omitempty"`
	// Batches is how many batches the rollout has.
	Batches int32 `json:"batches,omitempty"`
	// Updated is how many pods run the new images.
	Updated int32 `json:"updated,omitempty"`
	// Total is the workload's desired pod count.
	Total int32 `json:"total,omitempty"`
	// RolledBack is how many pods are back on their previous images.
	RolledBack int32 `json:"rolledBack,omitempty"`
	// Analysis is the last batch analysis' verdict.
	Analysis *AnalysisVerdict `json:"analysis,omitempty"`
	// Conditions are Progressing, Succeeded, RolledBack and Paused, and for kstatus Reconciling, Stalled and Ready.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AnalysisVerdict is a batch analysis' outcome.
type AnalysisVerdict struct {
	// Batch is the 1-based batch the analysis judged.
	Batch int32 `json:"batch"`
	// Pods is the updated pod count the batch ends at.
	Pods int32 `json:"pods"`
	// Verdict is Pass, Fail or Inconclusive, or Running while it measures.
	Verdict string `json:"verdict"`
}

// LastVerdict is the verdict a status shows after a step of rollout rolloutID whose analysis is
// run: run's; or, when the step carries none (an ended rollout's status, read from its lock), the
// verdict shown before, if it was of the same rollout (shownID).
func LastVerdict(run *analysis.Run, rolloutID string, shown *AnalysisVerdict, shownID string) *AnalysisVerdict {
	if run != nil {
		return &AnalysisVerdict{Batch: int32(run.Batch), Pods: int32(run.Pods), Verdict: run.Shown()}
	}
	if rolloutID != "" && rolloutID == shownID {
		return shown
	}
	return nil
}

// InPlaceRolloutSpec is what the rollout does. The namespace is the caller's: the CLI's
// --namespace, the Argo Rollout's, the CustomRun's.
type InPlaceRolloutSpec struct {
	// Target is the workload whose pods change.
	Target Target `json:"target"`
	// Images maps container names to their new images.
	Images map[string]string `json:"images,omitempty"`
	// Resources maps container names (containers and native sidecars) to the CPU and memory
	// requests and limits they get, changed in place through each pod's resize subresource,
	// beside or instead of Images: only the values named change, only cpu and memory, and only
	// values the container already declares.
	Resources map[string]corev1.ResourceRequirements `json:"resources,omitempty"`
	// Hooks run around each pod's change and its revert: an HTTP call to the pod through the
	// API server's pod proxy, or a handshake on a pod condition.
	Hooks *Hooks `json:"hooks,omitempty"`
	// IncludeInit lets Images name init containers that run once when a pod starts, whose new
	// image takes effect at its next start. Native sidecars (restartPolicy Always) need no
	// IncludeInit, since they are restarted on a new image as containers are.
	IncludeInit bool `json:"includeInit,omitempty"`
	// Batches are cumulative pod counts or percentages, strictly increasing, the last 100%
	// [100%].
	Batches []intstr.IntOrString `json:"batches,omitempty"`
	// UpTo is a hold point, a pod count or a percentage: the rollout stops once that many pods
	// are updated and their batch passed analysis, reports phase Holding and keeps the workload
	// held; the same rollout with a higher UpTo, or none, goes on [every pod].
	UpTo *intstr.IntOrString `json:"upTo,omitempty"`
	// MaxUnavailable is how many pods of a batch update at once, a count or a percentage [1].
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// GracePeriod is the wait between draining a pod (readiness gate False) and its restart [0].
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
	// Soak is how long a complete batch waits before its analysis and the next batch [0].
	Soak *metav1.Duration `json:"soak,omitempty"`
	// Timeout is the progress deadline of a pod and of a batch [10m].
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// AllowUnready starts even when pods are not Ready.
	AllowUnready bool `json:"allowUnready,omitempty"`
	// Analysis gates every batch on Prometheus golden signals; absent, no analysis runs.
	Analysis *analysis.Config `json:"analysis,omitempty"`
	// OnInconclusive is what an inconclusive analysis does: fail, pause or continue [pause].
	OnInconclusive string `json:"onInconclusive,omitempty"`
	// PinDigests says whether target tags are resolved to digests through their registry, with
	// the pods' pull credentials, and pods patched to TAG@DIGEST: auto (when the registry
	// answers; else the tag, said once), always (refuse when it does not) or never [auto].
	PinDigests string `json:"pinDigests,omitempty"`
	// PrePull pulls a batch's new images onto its nodes, with one short-lived pod per node,
	// before any pod of the batch restarts.
	PrePull bool `json:"prePull,omitempty"`
}

// Target names the workload: a StatefulSet, DaemonSet or Deployment by name, or Pods by a label
// selector.
type Target struct {
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Selector string `json:"selector,omitempty"`
}
