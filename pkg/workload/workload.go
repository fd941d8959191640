package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/badinput"
)

// Kind is a kind of workload.
type Kind string

// The workload kinds.
const (
	StatefulSet Kind = "StatefulSet"
	DaemonSet   Kind = "DaemonSet"
	Deployment  Kind = "Deployment"
	Pods        Kind = "Pods"
)

// ParseKind accepts a kind in any case, and the usual short names.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "statefulset", "statefulsets", "sts":
		return StatefulSet, nil
	case "daemonset", "daemonsets", "ds":
		return DaemonSet, nil
	case "deployment", "deployments", "deploy":
		return Deployment, nil
	case "pods", "pod", "po":
		return Pods, nil
	}
	return "", fmt.Errorf("unknown workload kind %q: use StatefulSet, DaemonSet, Deployment or Pods", s)
}

// Ref names a workload. Pods are named by a label selector instead of a name.
type Ref struct {
	Kind      Kind
	Namespace string
	Name      string
	Selector  string
}

func (r Ref) String() string {
	if r.Kind == Pods {
		return fmt.Sprintf("pods in %s matching %q", r.Namespace, r.Selector)
	}
	return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
}

// Workload is a workload as observed at one moment, with the writes that adapt it to in-place
// updates: what decides reads the Observed side, what acts writes through the Writer side.
type Workload interface {
	Observed
	Writer
}

// Observed is a workload as observed at one moment: what it is, what it runs, and the checks a
// rollout starts from. Nothing on it writes.
type Observed interface {
	Ref() Ref
	// Lock returns the rollout lock, or nil.
	Lock() *Lock
	// Previous returns what a rollout to ch records in its lock before it changes the workload,
	// to hand it back: the template's images of those containers and, of their resources, the
	// values ch names (a pod's, for label-selected pods), and the update strategy.
	Previous(ch Change) (Change, json.RawMessage)
	// Object is what an Event about the workload regards: the object as observed; ok is false
	// for label-selected pods, which have none.
	Object() (ref corev1.ObjectReference, ok bool)
	// Template returns the pod template, or nil for label-selected pods.
	Template() *corev1.PodTemplateSpec
	// Replicas is how many pods the workload should have.
	Replicas() int
	// Pods returns the workload's live pods in update order, read-only: they may be a watch's
	// cache's own (PodLister).
	Pods() []*corev1.Pod
	// PodSelector selects the workload's pods (and, maybe, others: Pods filters by owner).
	PodSelector() labels.Selector
	// CheckStart returns an error when a rollout to ch cannot start: an unknown container,
	// resources a resize cannot set (CheckChange), or an unfinished rollout of the controller's
	// own (pods not at the template's revision, whose template may differ from the pods' in
	// more than images).
	CheckStart(ch Change, includeInit bool) error
	// RevisionLabels are the labels an updated pod carries so that the controller counts it as
	// updated. ok is false while the controller has not yet computed the new revision.
	RevisionLabels(ch Change) (labels map[string]string, ok bool, err error)
	// Counted reports whether a pod the rollout never touched already has ch (Runs) and carries
	// the revision labels: the controller created it from the new template.
	Counted(pod *corev1.Pod, ch Change, labels map[string]string) bool
}

// Writer is the writes that adapt a workload to in-place updates and hand it back. Every write
// is one API call carrying the resourceVersion observed; on a conflict the caller observes again.
// Each writes record, the rollout's record, as the lock annotation, as it is: the workload reads
// of it only the previous images, resources and strategy (Lock), which record must carry from
// Start on.
type Writer interface {
	// Start writes the lock and freezes the controller, so that no pod is recreated while it
	// changes. StatefulSets and DaemonSets get ch, the rollout's target images and resources, in
	// their template in the same write, which makes the controller compute the revision updated
	// pods are labelled with. record carries what Previous returned, or, for a rollback that freezes
	// a workload again after a finished rollout, what the lock recorded.
	Start(ctx context.Context, record string, ch Change) error
	// Retarget writes a new lock and template images and resources for a rollout that
	// supersedes another.
	Retarget(ctx context.Context, record string, ch Change) error
	// SetLock writes the lock alone (its phase or reason changed).
	SetLock(ctx context.Context, record string) error
	// Finalize takes the next step of handing the workload back with the target ch and the
	// strategy the lock recorded; done once it wrote record, the finished lock, with the last.
	Finalize(ctx context.Context, record string, ch Change) (done bool, err error)
	// Restore takes the next step of handing the workload back with the images, resources and
	// strategy the lock recorded; done once it wrote record with the last. A template someone
	// else changed during the rollout to ch (Foreign) keeps their change unless restoreForeign.
	Restore(ctx context.Context, record string, ch Change, restoreForeign bool) (done bool, err error)
}

// Load observes the workload and its pods, reading both from the API server.
func Load(ctx context.Context, client kubernetes.Interface, ref Ref) (Workload, error) {
	return LoadWith(ctx, client, nil, ref)
}

// LoadWith is Load reading the pods through lister (a PodWatch's cache); nil lists them from the
// API server. The workload object itself, which carries the lock, is always read from the API
// server.
func LoadWith(ctx context.Context, client kubernetes.Interface, lister PodLister, ref Ref) (Workload, error) {
	if lister == nil {
		lister = apiPods{client}
	}
	var (
		w   Workload
		err error
	)
	switch ref.Kind {
	case StatefulSet:
		w, err = loadStatefulSet(ctx, client, lister, ref)
	case DaemonSet:
		w, err = loadDaemonSet(ctx, client, lister, ref)
	case Deployment:
		w, err = loadDeployment(ctx, client, lister, ref)
	case Pods:
		w, err = loadPods(ctx, client, lister, ref)
	default:
		return nil, &InvalidError{Msg: fmt.Sprintf("unknown workload kind %q", ref.Kind)}
	}
	if apierrors.IsNotFound(err) {
		return nil, &InvalidError{Msg: fmt.Sprintf("%s not found", ref)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	return w, nil
}

// InvalidError is bad input: the workload cannot be rolled out as asked, and nothing was written.
type InvalidError = badinput.InvalidError

// Fix names a choice that lets bad input through: a driver maps it to its own flag or field.
type Fix = badinput.Fix

// FixAllowOwned: update label-selected pods that a controller owns anyway.
const FixAllowOwned = badinput.FixAllowOwned

// NotReadyError means the workload's controller has not caught up yet; try again shortly.
type NotReadyError struct{ Msg string }

func (e *NotReadyError) Error() string { return e.Msg }

// DryRun marks w, as loaded, so that each of its writes is sent with dryRun All: the API server
// validates it and runs it through admission (ValidatingAdmissionPolicies, webhooks) as it would
// the write itself, and stores nothing. Every write keeps its preconditions (the resourceVersion,
// the JSON patch's tests), so a dry run against an object changed since it was loaded fails as
// the write would. It returns w.
func DryRun(w Workload) Workload {
	w.(interface{ setDryRun() }).setDryRun()
	return w
}
