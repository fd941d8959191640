package workload

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

type deployment struct {
	client kubernetes.Interface
	dep    *appsv1.Deployment
	lock   *Lock
	active []*appsv1.ReplicaSet // owned ReplicaSets with replicas
	pods   []*corev1.Pod
	// dryRun is the dryRun every write is sent with (DryRun).
	dryRun []string
}

func (d *deployment) setDryRun() { d.dryRun = []string{metav1.DryRunAll} }

// deploymentStrategy is what the lock records of a Deployment: whether it was paused.
type deploymentStrategy struct {
	Paused bool `json:"paused"`
}

func loadDeployment(ctx context.Context, client kubernetes.Interface, lister PodLister, ref Ref) (*deployment, error) {
	dep, err := client.AppsV1().Deployments(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	lock, err := parseLock(Deployment, dep.Namespace, dep.Name, dep.Annotations)
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("parsing selector: %w", err)
	}
	rsList, err := client.AppsV1().ReplicaSets(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing replica sets: %w", err)
	}
	d := &deployment{client: client, dep: dep, lock: lock}
	for i := range rsList.Items {
		rs := &rsList.Items[i]
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != dep.UID {
			continue
		}
		if rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
			d.active = append(d.active, rs)
			pods, err := ownedPods(ctx, lister, dep.Namespace, rs.Spec.Selector, rs.UID)
			if err != nil {
				return nil, err
			}
			d.pods = append(d.pods, pods...)
		}
	}
	sortByName(d.pods)
	return d, nil
}

func (d *deployment) Ref() Ref {
	return Ref{Kind: Deployment, Namespace: d.dep.Namespace, Name: d.dep.Name}
}
func (d *deployment) Lock() *Lock { return d.lock }

// previous is what the lock recorded to hand the Deployment back: none without a lock.
func (d *deployment) previous() *Lock {
	if d.lock == nil {
		return &Lock{}
	}
	return d.lock
}
func (d *deployment) PodSelector() labels.Selector { return selectorOf(d.dep.Spec.Selector) }

func (d *deployment) Template() *corev1.PodTemplateSpec { return &d.dep.Spec.Template }
func (d *deployment) Pods() []*corev1.Pod               { return d.pods }

func (d *deployment) Replicas() int {
	if d.dep.Spec.Replicas == nil {
		return 1
	}
	return int(*d.dep.Spec.Replicas)
}

// replicaSet is the one ReplicaSet whose pods the rollout updates.
func (d *deployment) replicaSet() (*appsv1.ReplicaSet, error) {
	if len(d.active) != 1 {
		return nil, &InvalidError{Msg: fmt.Sprintf("%s has %d ReplicaSets with replicas, want exactly 1: a rollout of its own is in progress; finish it first", d.Ref(), len(d.active))}
	}
	return d.active[0], nil
}

// equalIgnoreHash compares templates as the Deployment controller does, ignoring the
// pod-template-hash label.
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return equality.Semantic.DeepEqual(a, b)
}

func (d *deployment) CheckStart(ch Change, includeInit bool) error {
	if err := CheckChange(d, ch, includeInit); err != nil {
		return err
	}
	if d.dep.Status.ObservedGeneration < d.dep.Generation {
		return &NotReadyError{fmt.Sprintf("%s: the Deployment controller has not observed generation %d yet", d.Ref(), d.dep.Generation)}
	}
	rs, err := d.replicaSet()
	if err != nil {
		return err
	}
	if !equalIgnoreHash(&rs.Spec.Template, d.Template()) {
		return &InvalidError{Msg: fmt.Sprintf("%s has an unfinished rollout: ReplicaSet %s does not run the Deployment's template; finish or undo it first", d.Ref(), rs.Name)}
	}
	return nil
}

func (d *deployment) patch(ctx context.Context, p objectPatch) error {
	if err := writeIfUnchanged(ctx, versionOf(d.dep), p, d.read, d.write); err != nil {
		return fmt.Errorf("writing %s: %w", d.Ref(), err)
	}
	return nil
}

// write sends a patch of the Deployment; read gets its version now.
func (d *deployment) write(ctx context.Context, pt types.PatchType, patch []byte) error {
	_, err := d.client.AppsV1().Deployments(d.dep.Namespace).Patch(ctx, d.dep.Name, pt, patch, metav1.PatchOptions{DryRun: d.dryRun})
	return err
}

func (d *deployment) read(ctx context.Context) (objectVersion, error) {
	now, err := d.client.AppsV1().Deployments(d.dep.Namespace).Get(ctx, d.dep.Name, metav1.GetOptions{})
	if err != nil {
		return objectVersion{}, fmt.Errorf("reading %s again: %w", d.Ref(), err)
	}
	return versionOf(now), nil
}

// Previous records the template's images and resources of the rollout's containers and whether
// the Deployment was paused.
func (d *deployment) Previous(ch Change) (Change, json.RawMessage) {
	return TemplateChange(d.Template(), ch), strategyJSON(deploymentStrategy{Paused: d.dep.Spec.Paused})
}

// Start pauses the Deployment: unpaused, its controller races an in-place change and can
// recreate every pod. The template changes only at the end.
func (d *deployment) Start(ctx context.Context, record string, _ Change) error {
	return d.patch(ctx, objectPatch{lock: record, spec: map[string]any{"paused": true}})
}

func (d *deployment) Retarget(ctx context.Context, record string, _ Change) error {
	return d.SetLock(ctx, record)
}

func (d *deployment) SetLock(ctx context.Context, record string) error {
	if err := writeLock(ctx, d.Ref(), versionOf(d.dep), record, d.read, d.write); err != nil {
		return fmt.Errorf("writing %s: %w", d.Ref(), err)
	}
	return nil
}

func (d *deployment) RevisionLabels(Change) (map[string]string, bool, error) {
	return map[string]string{}, true, nil
}

func (d *deployment) Counted(pod *corev1.Pod, ch Change, _ map[string]string) bool {
	return Runs(pod, ch)
}

// Finalize patches the ReplicaSet's template first, then the Deployment's template together with
// unpausing: the controller then finds the ReplicaSet equal to its template and adopts it, so no
// new ReplicaSet is created and no pod is recreated.
func (d *deployment) Finalize(ctx context.Context, record string, ch Change) (bool, error) {
	return d.handBack(ctx, record, ch, ch)
}

// Restore puts the previous images and resources back on the ReplicaSet (if a finished rollout
// had changed it) and the Deployment, and unpauses. A Deployment template someone else changed
// during the rollout keeps their change unless restoreForeign: unpaused, its controller then
// rolls it out.
func (d *deployment) Restore(ctx context.Context, record string, ch Change, restoreForeign bool) (bool, error) {
	previous := d.previous().PreviousChange()
	dep := previous
	if !restoreForeign && Foreign(d, ch) != nil {
		dep = Change{}
	}
	return d.handBack(ctx, record, previous, dep)
}

// handBack puts rs on the ReplicaSet's template, then dep on the Deployment's template with its
// strategy.
func (d *deployment) handBack(ctx context.Context, record string, rsChange, dep Change) (bool, error) {
	rs, err := d.replicaSet()
	if err != nil {
		return false, err
	}
	if !TemplateHas(&rs.Spec.Template, rsChange) {
		p := objectPatch{resourceVersion: rs.ResourceVersion, spec: map[string]any{"template": templatePatch(&rs.Spec.Template, rsChange)}}
		if _, err := d.client.AppsV1().ReplicaSets(rs.Namespace).Patch(ctx, rs.Name, types.StrategicMergePatchType, p.bytes(), metav1.PatchOptions{DryRun: d.dryRun}); err != nil {
			return false, fmt.Errorf("writing ReplicaSet %s/%s: %w", rs.Namespace, rs.Name, err)
		}
		return false, nil
	}
	var prev deploymentStrategy
	if err := json.Unmarshal(d.previous().PreviousStrategy, &prev); err != nil {
		return false, fmt.Errorf("decoding the recorded strategy of %s: %w", d.Ref(), err)
	}
	return true, d.patch(ctx, objectPatch{lock: record, spec: map[string]any{
		"paused":   prev.Paused,
		"template": templatePatch(d.Template(), dep),
	}})
}

func (d *deployment) Object() (corev1.ObjectReference, bool) {
	return objectRef(Deployment, &d.dep.ObjectMeta), true
}
