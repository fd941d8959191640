package workload

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Revision is a revision of a StatefulSet's or DaemonSet's pod template, as its controller
// recorded it in a ControllerRevision.
type Revision struct {
	// Name is the ControllerRevision's.
	Name string
	// Hash is the value of the controller-revision-hash label of the pods at this revision: the
	// revision's name for a StatefulSet, its bare hash for a DaemonSet.
	Hash string
	// Number is the ControllerRevision's .revision: a later template has a higher one.
	Number int64
	// Template is the pod template of the revision.
	Template corev1.PodTemplateSpec
}

// Revisions are the template revisions of a StatefulSet or DaemonSet that its controller keeps
// (those its pods run among them), by the revision label their pods carry.
type Revisions map[string]Revision

// ReadRevisions lists the ControllerRevisions the StatefulSet or DaemonSet ref controls (uid
// is its UID), each with the template it records.
func ReadRevisions(ctx context.Context, client kubernetes.Interface, ref Ref, uid types.UID, selector *metav1.LabelSelector) (Revisions, error) {
	if ref.Kind != StatefulSet && ref.Kind != DaemonSet {
		return nil, fmt.Errorf("%s keeps no ControllerRevisions", ref)
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("parsing the selector of %s: %w", ref, err)
	}
	list, err := client.AppsV1().ControllerRevisions(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the revisions of %s: %w", ref, err)
	}
	out := Revisions{}
	for i := range list.Items {
		cr := &list.Items[i]
		if owner := metav1.GetControllerOf(cr); owner == nil || owner.UID != uid {
			continue
		}
		r, err := revisionOf(ref.Kind, cr)
		if err != nil {
			return nil, fmt.Errorf("reading revision %s of %s: %w", cr.Name, ref, err)
		}
		out[r.Hash] = r
	}
	return out, nil
}

// revisionOf reads cr, a ControllerRevision of a workload of kind. Both controllers record the
// template as a strategic merge patch that replaces it: {"spec":{"template":{...,"$patch":"replace"}}}.
func revisionOf(kind Kind, cr *appsv1.ControllerRevision) (Revision, error) {
	var patch struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &patch); err != nil {
		return Revision{}, fmt.Errorf("decoding its data: %w", err)
	}
	if patch.Spec.Template == nil {
		return Revision{}, fmt.Errorf("its data holds no spec.template")
	}
	hash := cr.Name
	if kind == DaemonSet {
		hash = cr.Labels[revisionLabel]
	}
	return Revision{Name: cr.Name, Hash: hash, Number: cr.Revision, Template: *patch.Spec.Template}, nil
}

// PodRevision is the revision label of pod.
func PodRevision(pod *corev1.Pod) string { return pod.Labels[revisionLabel] }

// ReadRevisionsOf is ReadRevisions of w, a StatefulSet or a DaemonSet as loaded.
func ReadRevisionsOf(ctx context.Context, client kubernetes.Interface, w Observed) (Revisions, error) {
	switch v := unwrap(w).(type) {
	case *statefulSet:
		return ReadRevisions(ctx, client, v.Ref(), v.sts.UID, v.sts.Spec.Selector)
	case *daemonSet:
		return ReadRevisions(ctx, client, v.Ref(), v.ds.UID, v.ds.Spec.Selector)
	}
	return nil, fmt.Errorf("%s keeps no ControllerRevisions", w.Ref())
}

// TemplateRevision is the revision of w's template now, as its controller recorded it among
// revs, and the labels a pod at that revision carries (a DaemonSet's pod-template-generation
// with the hash); false while the controller has not recorded it, or for a kind that keeps no
// revisions.
func TemplateRevision(w Observed, revs Revisions) (Revision, map[string]string, bool) {
	switch v := unwrap(w).(type) {
	case *statefulSet:
		if !v.observed() {
			return Revision{}, nil, false
		}
		r, ok := revs[v.sts.Status.UpdateRevision]
		return r, map[string]string{revisionLabel: v.sts.Status.UpdateRevision}, ok
	case *daemonSet:
		labels, ok := v.currentLabels()
		if !ok {
			return Revision{}, nil, false
		}
		r, ok := revs[labels[revisionLabel]]
		return r, labels, ok
	}
	return Revision{}, nil, false
}

// OnDelete reports whether w is a StatefulSet or a DaemonSet whose update strategy is OnDelete:
// its controller recreates no pod for its revision.
func OnDelete(w Observed) bool {
	switch v := unwrap(w).(type) {
	case *statefulSet:
		return v.strategyType() == v.onDeleteType
	case *daemonSet:
		return v.strategyType() == v.onDeleteType
	}
	return false
}

// unwrap is the workload an Owned one wraps, or w.
func unwrap(w Observed) Observed {
	if o, ok := w.(*owned); ok {
		return o.Workload
	}
	return w
}
