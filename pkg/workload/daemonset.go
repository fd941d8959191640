package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	// templateGenerationLabel is the DaemonSet pod label the controller also counts a pod
	// updated by.
	templateGenerationLabel = "pod-template-generation"
	// templateGenerationAnnotation holds the DaemonSet's template generation.
	templateGenerationAnnotation = "deprecated.daemonset.template.generation"
)

type daemonSet struct {
	*onDelete
	ds       *appsv1.DaemonSet
	pods     []*corev1.Pod
	revision *appsv1.ControllerRevision // the newest owned ControllerRevision
}

func (d *daemonSet) PodSelector() labels.Selector { return selectorOf(d.ds.Spec.Selector) }

func loadDaemonSet(ctx context.Context, client kubernetes.Interface, lister PodLister, ref Ref) (*daemonSet, error) {
	ds, err := client.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	lock, err := parseLock(DaemonSet, ds.Namespace, ds.Name, ds.Annotations)
	if err != nil {
		return nil, err
	}
	pods, err := ownedPods(ctx, lister, ds.Namespace, ds.Spec.Selector, ds.UID)
	if err != nil {
		return nil, err
	}
	sortByName(pods)
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("parsing selector: %w", err)
	}
	revs, err := client.AppsV1().ControllerRevisions(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing controller revisions: %w", err)
	}
	d := &daemonSet{
		onDelete: &onDelete{
			ref:  Ref{Kind: DaemonSet, Namespace: ds.Namespace, Name: ds.Name},
			lock: lock, template: &ds.Spec.Template, strategy: ds.Spec.UpdateStrategy,
			onDeleteType: string(appsv1.OnDeleteDaemonSetStrategyType),
			observed:     versionOf(ds),
			write: func(ctx context.Context, pt types.PatchType, patch []byte, opts metav1.PatchOptions) error {
				_, err := client.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, pt, patch, opts)
				return err
			},
			read: func(ctx context.Context) (objectVersion, error) {
				now, err := client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
				if err != nil {
					return objectVersion{}, fmt.Errorf("reading DaemonSet %s/%s again: %w", ds.Namespace, ds.Name, err)
				}
				return versionOf(now), nil
			},
		},
		ds: ds, pods: pods,
	}
	for i := range revs.Items {
		r := &revs.Items[i]
		if ref := metav1.GetControllerOf(r); ref != nil && ref.UID == ds.UID && (d.revision == nil || r.Revision > d.revision.Revision) {
			d.revision = r
		}
	}
	return d, nil
}

func (d *daemonSet) Ref() Ref {
	return Ref{Kind: DaemonSet, Namespace: d.ds.Namespace, Name: d.ds.Name}
}
func (d *daemonSet) Lock() *Lock                       { return d.lock }
func (d *daemonSet) Template() *corev1.PodTemplateSpec { return &d.ds.Spec.Template }
func (d *daemonSet) Pods() []*corev1.Pod               { return d.pods }
func (d *daemonSet) Replicas() int                     { return int(d.ds.Status.DesiredNumberScheduled) }

// currentLabels are the revision labels of the template as the controller last saw it: the bare
// hash of the newest ControllerRevision (DaemonSet status names no revision) and the template
// generation.
func (d *daemonSet) currentLabels() (map[string]string, bool) {
	if d.ds.Status.ObservedGeneration < d.ds.Generation || d.revision == nil {
		return nil, false
	}
	hash := d.revision.Labels[revisionLabel]
	gen := d.ds.Annotations[templateGenerationAnnotation]
	if hash == "" || gen == "" {
		return nil, false
	}
	return map[string]string{revisionLabel: hash, templateGenerationLabel: gen}, true
}

func (d *daemonSet) CheckStart(ch Change, includeInit bool) error {
	if err := CheckChange(d, ch, includeInit); err != nil {
		return err
	}
	labels, ok := d.currentLabels()
	if !ok {
		return &NotReadyError{fmt.Sprintf("%s: the DaemonSet controller has not observed generation %d yet", d.Ref(), d.ds.Generation)}
	}
	for _, p := range d.pods {
		// The controller's own rule: the hash or the template generation matches.
		if p.Labels[revisionLabel] != labels[revisionLabel] && p.Labels[templateGenerationLabel] != labels[templateGenerationLabel] {
			return &InvalidError{Msg: fmt.Sprintf("%s has an unfinished rollout: pod %s is at revision %s, not the template's %s; finish or undo it first",
				d.Ref(), p.Name, p.Labels[revisionLabel], labels[revisionLabel])}
		}
	}
	return nil
}

func (d *daemonSet) RevisionLabels(ch Change) (map[string]string, bool, error) {
	if !TemplateHas(d.Template(), ch) {
		return nil, false, nil
	}
	labels, ok := d.currentLabels()
	return labels, ok, nil
}

func (d *daemonSet) Counted(pod *corev1.Pod, ch Change, labels map[string]string) bool {
	return Runs(pod, ch) && (pod.Labels[revisionLabel] == labels[revisionLabel] || pod.Labels[templateGenerationLabel] == labels[templateGenerationLabel])
}

func (d *daemonSet) Object() (corev1.ObjectReference, bool) {
	return objectRef(DaemonSet, &d.ds.ObjectMeta), true
}
