package v1alpha1

import (
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

// InPlaceRollout is a rollout of new images to a workload's live pods, in place.
type InPlaceRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InPlaceRolloutSpec `json:"spec"`
}

// InPlaceRolloutSpec is what the rollout does. The namespace is the caller's: the CLI's
// --namespace, the Argo Rollout's, the CustomRun's.
type InPlaceRolloutSpec struct {
	// Target is the workload whose pods change.
	Target Target `json:"target"`
	// Images maps container names to their new images.
	Images map[string]string `json:"images,omitempty"`
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
