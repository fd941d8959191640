package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
)

// PolicyKind is the kind of an in-place rollout policy.
const PolicyKind = "InPlaceRolloutPolicy"

// PolicyAnnotation, on a StatefulSet or a DaemonSet whose manifest says updateStrategy OnDelete,
// names the InPlaceRolloutPolicy of its namespace under which inplace-rollout controller rolls
// its pods out in place to its template, whenever they run an older revision of it.
const PolicyAnnotation = "inplace-rollout.io/policy"

// InPlaceRolloutPolicy says how inplace-rollout controller rolls out, in place, the template of
// each StatefulSet and DaemonSet of its namespace that names it (PolicyAnnotation). The template
// is the workload's owner's (a GitOps tool applies it from Git): the controller never writes the
// workload's spec, and brings the pods to the template's revision in batches, with analysis, and
// back when a batch fails.
type InPlaceRolloutPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InPlaceRolloutPolicySpec `json:"spec"`
	// Status is where each workload under the policy is, written by inplace-rollout controller.
	Status InPlaceRolloutPolicyStatus `json:"status,omitzero"`
}

// InPlaceRolloutPolicySpec is how each rollout under the policy goes: an InPlaceRollout's spec
// without target and images, which the workload and its template give.
type InPlaceRolloutPolicySpec struct {
	// IncludeInit lets a template change the images of init containers that run once when a pod
	// starts, whose new image takes effect at its next start. Native sidecars (restartPolicy
	// Always) need no IncludeInit.
	IncludeInit bool `json:"includeInit,omitempty"`
	// Batches are cumulative pod counts or percentages, strictly increasing, the last 100%
	// [100%].
	Batches []intstr.IntOrString `json:"batches,omitempty"`
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
	// OnInconclusive is what an inconclusive analysis does: fail or continue [fail]. A policy
	// cannot pause: no object of its rollouts is there for a person to accept a batch on.
	OnInconclusive string `json:"onInconclusive,omitempty"`
	// PrePull pulls a batch's new images onto its nodes, with one short-lived pod per node,
	// before any pod of the batch restarts.
	PrePull bool `json:"prePull,omitempty"`
}

// RolloutSpec is the spec of the rollout of target to images under the policy. The images are
// the template's as its owner spells them, never pinned to digests.
func (s *InPlaceRolloutPolicySpec) RolloutSpec(target Target, images map[string]string) InPlaceRolloutSpec {
	onInconclusive := s.OnInconclusive
	if onInconclusive == "" {
		onInconclusive = "fail"
	}
	return InPlaceRolloutSpec{
		Target: target, Images: images, IncludeInit: s.IncludeInit, Batches: s.Batches,
		MaxUnavailable: s.MaxUnavailable, GracePeriod: s.GracePeriod, Soak: s.Soak, Timeout: s.Timeout,
		AllowUnready: s.AllowUnready, Analysis: s.Analysis, OnInconclusive: onInconclusive,
		PinDigests: "never", PrePull: s.PrePull,
	}
}

// InPlaceRolloutPolicyStatus is where each workload under the policy is.
type InPlaceRolloutPolicyStatus struct {
	// ObservedGeneration is the metadata.generation of the spec the rollouts in flight follow.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Workloads are the StatefulSets and DaemonSets that name the policy, by kind and name.
	Workloads []PolicyWorkloadStatus `json:"workloads,omitempty"`
}

// PolicyWorkloadStatus is where one workload under the policy is: its last rollout, and the
// revision that failed, which is not tried again until the template changes.
type PolicyWorkloadStatus struct {
	// Kind is StatefulSet or DaemonSet; Name the workload's.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Revision is the template revision (the ControllerRevision's name) the pods are rolled to.
	Revision string `json:"revision,omitempty"`
	// Phase is where the rollout to Revision is: Progressing, Analyzing, Paused, Succeeded,
	// RollingBack, RolledBack or Failed; NotInPlace when the revision changes a field a live pod
	// cannot take (the message names it; nothing was changed).
	Phase string `json:"phase,omitempty"`
	// Reason says why, as a code, when the rollout is paused, rolling back or ended other than by succeeding.
	Reason string `json:"reason,omitempty"`
	// Message says where the rollout is, and what to do when it waits for a person.
	Message string `json:"message,omitempty"`
	// RolloutID names the rollout on the workload's lock and in its Events.
	RolloutID string `json:"rolloutID,omitempty"`
	// Batch is the 1-based batch in progress, of Batches.
	Batch   int32 `json:"batch,omitempty"`
	Batches int32 `json:"batches,omitempty"`
	// Updated is how many pods run the revision, of Total; RolledBack how many went back.
	Updated    int32 `json:"updated,omitempty"`
	Total      int32 `json:"total,omitempty"`
	RolledBack int32 `json:"rolledBack,omitempty"`
	// Analysis is the last batch analysis' verdict.
	Analysis *AnalysisVerdict `json:"analysis,omitempty"`
	// FailedRevision is the last revision whose rollout rolled back: the controller does not roll
	// it out again, and the workload is Degraded, until its template changes.
	FailedRevision string `json:"failedRevision,omitempty"`
	// LastTransitionTime is when Phase last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitzero"`
}
