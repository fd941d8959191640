package workload

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// podSet is a set of pods chosen by a label selector, with no controller to freeze. Its lock
// lives on a ConfigMap named after the selector, since there is no workload object to carry it.
type podSet struct {
	client    kubernetes.Interface
	ref       Ref
	pods      []*corev1.Pod
	lock      *Lock
	configMap *corev1.ConfigMap // nil until the rollout starts
	// dryRun is the dryRun every write is sent with (DryRun).
	dryRun []string
}

func (p *podSet) setDryRun() { p.dryRun = []string{metav1.DryRunAll} }

func loadPods(ctx context.Context, client kubernetes.Interface, lister PodLister, ref Ref) (*podSet, error) {
	sel, err := labels.Parse(ref.Selector)
	if err != nil || ref.Selector == "" {
		return nil, &InvalidError{Msg: fmt.Sprintf("pods: selector %q is not a valid, non-empty label selector", ref.Selector)}
	}
	list, err := lister.ListPods(ctx, ref.Namespace, sel)
	if err != nil {
		return nil, err
	}
	p := &podSet{client: client, ref: ref}
	for _, pod := range list {
		if active(pod) {
			p.pods = append(p.pods, pod)
		}
	}
	sortByName(p.pods)
	cm, err := client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, PodLockName(ref.Selector), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading the lock of %s: %w", ref, err)
	default:
		p.configMap = cm
		if p.lock, err = parseLock(Pods, cm.Namespace, cm.Name, cm.Annotations); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *podSet) Ref() Ref                          { return p.ref }
func (p *podSet) Lock() *Lock                       { return p.lock }
func (p *podSet) Template() *corev1.PodTemplateSpec { return nil }

func (p *podSet) PodSelector() labels.Selector {
	sel, err := labels.Parse(p.ref.Selector)
	if err != nil {
		return labels.Nothing() // loadPods refused it already
	}
	return sel
}
func (p *podSet) Pods() []*corev1.Pod { return p.pods }
func (p *podSet) Replicas() int       { return len(p.pods) }

func (p *podSet) CheckStart(ch Change, includeInit bool) error {
	if len(p.pods) == 0 {
		return &InvalidError{Msg: fmt.Sprintf("no pods match %s", p.ref)}
	}
	for _, pod := range p.pods {
		// Found here, before the lock is written, rather than when the pod's turn comes.
		if rp := pod.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
			return &InvalidError{Msg: fmt.Sprintf("pod %s/%s: its restartPolicy is %s; only Always restarts a container on an image change, so it cannot be updated in place: leave it out of the selector",
				pod.Namespace, pod.Name, rp)}
		}
	}
	return CheckChange(p, ch, includeInit)
}

// CheckOwned refuses label-selected pods (target Pods) that a controller owns, unless allowed:
// the controller recreates such a pod from its own template, on the old images, and a
// StatefulSet, DaemonSet or Deployment is better targeted itself. Other kinds pass.
func CheckOwned(w Observed, allow bool) error {
	if w.Ref().Kind != Pods || allow {
		return nil
	}
	for _, pod := range w.Pods() {
		if ref := metav1.GetControllerOf(pod); ref != nil {
			return &InvalidError{Msg: fmt.Sprintf("pod %s/%s is controlled by %s/%s, which would recreate it from its own template on the old images; target the owning workload instead (its StatefulSet, DaemonSet or Deployment)",
				pod.Namespace, pod.Name, ref.Kind, ref.Name), Fix: FixAllowOwned}
		}
	}
	return nil
}

// Previous records the first pod's images and resources (init containers too, as a workload's
// template's are recorded); label-selected pods have no strategy to restore.
func (p *podSet) Previous(ch Change) (Change, json.RawMessage) {
	if len(p.pods) == 0 {
		return Change{Images: map[string]string{}}, nil
	}
	return TemplateChange(&corev1.PodTemplateSpec{Spec: p.pods[0].Spec}, ch), nil
}

// Start writes the lock: there is no controller to freeze.
func (p *podSet) Start(ctx context.Context, record string, _ Change) error {
	if p.configMap != nil {
		return p.SetLock(ctx, record)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: PodLockName(p.ref.Selector), Namespace: p.ref.Namespace,
		Annotations: map[string]string{LockAnnotation: record, SelectorAnnotation: p.ref.Selector},
	}}
	if _, err := p.client.CoreV1().ConfigMaps(p.ref.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: p.dryRun}); err != nil {
		return fmt.Errorf("writing the lock of %s: %w", p.ref, err)
	}
	return nil
}

func (p *podSet) Retarget(ctx context.Context, record string, _ Change) error {
	return p.SetLock(ctx, record)
}

func (p *podSet) SetLock(ctx context.Context, record string) error {
	cm := p.configMap.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[LockAnnotation] = record
	if _, err := p.client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{DryRun: p.dryRun}); err != nil {
		return fmt.Errorf("writing the lock of %s: %w", p.ref, err)
	}
	return nil
}

func (p *podSet) RevisionLabels(Change) (map[string]string, bool, error) {
	return map[string]string{}, true, nil
}

func (p *podSet) Counted(pod *corev1.Pod, ch Change, _ map[string]string) bool {
	return Runs(pod, ch)
}

// Finalize and Restore write the finished record: the pods are all there is to hand back.
func (p *podSet) Finalize(ctx context.Context, record string, _ Change) (bool, error) {
	return p.finish(ctx, record)
}

func (p *podSet) Restore(ctx context.Context, record string, _ Change, _ bool) (bool, error) {
	return p.finish(ctx, record)
}

func (p *podSet) finish(ctx context.Context, record string) (bool, error) {
	if err := p.SetLock(ctx, record); err != nil {
		return false, err
	}
	return true, nil
}

// Object: label-selected pods have no object an Event could regard.
func (p *podSet) Object() (corev1.ObjectReference, bool) { return corev1.ObjectReference{}, false }
