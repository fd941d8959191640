package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// revisionLabel is the pod label both the StatefulSet and the DaemonSet controllers judge a pod's
// revision by (never its images).
const revisionLabel = appsv1.ControllerRevisionHashLabelKey

type statefulSet struct {
	client kubernetes.Interface
	sts    *appsv1.StatefulSet
	lock   *Lock
	pods   []*corev1.Pod
}

func loadStatefulSet(ctx context.Context, client kubernetes.Interface, ref Ref) (*statefulSet, error) {
	sts, err := client.AppsV1().StatefulSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	lock, err := parseLock(StatefulSet, sts.Namespace, sts.Name, sts.Annotations)
	if err != nil {
		return nil, err
	}
	pods, err := ownedPods(ctx, client, sts.Namespace, sts.Spec.Selector, sts.UID)
	if err != nil {
		return nil, err
	}
	sortByOrdinalDesc(pods)
	return &statefulSet{client: client, sts: sts, lock: lock, pods: pods}, nil
}

func (s *statefulSet) Ref() Ref {
	return Ref{Kind: StatefulSet, Namespace: s.sts.Namespace, Name: s.sts.Name}
}
func (s *statefulSet) Lock() *Lock                       { return s.lock }
func (s *statefulSet) Template() *corev1.PodTemplateSpec { return &s.sts.Spec.Template }
func (s *statefulSet) Pods() []*corev1.Pod               { return s.pods }

func (s *statefulSet) Replicas() int {
	if s.sts.Spec.Replicas == nil {
		return 1
	}
	return int(*s.sts.Spec.Replicas)
}

func (s *statefulSet) observed() bool {
	return s.sts.Status.ObservedGeneration >= s.sts.Generation && s.sts.Status.UpdateRevision != ""
}

func (s *statefulSet) CheckStart(images map[string]string, includeInit bool) error {
	if err := checkImages(s.Ref(), s.Template(), images, includeInit); err != nil {
		return err
	}
	if !s.observed() {
		return &NotReadyError{fmt.Sprintf("%s: the StatefulSet controller has not observed generation %d yet", s.Ref(), s.sts.Generation)}
	}
	for _, p := range s.pods {
		if rev := p.Labels[revisionLabel]; rev != s.sts.Status.UpdateRevision {
			return &InvalidError{fmt.Sprintf("%s has an unfinished rollout: pod %s is at revision %s, not the template's %s; finish or undo it first",
				s.Ref(), p.Name, rev, s.sts.Status.UpdateRevision)}
		}
	}
	return nil
}

func (s *statefulSet) patch(ctx context.Context, p objectPatch) error {
	p.resourceVersion = s.sts.ResourceVersion
	_, err := s.client.AppsV1().StatefulSets(s.sts.Namespace).Patch(ctx, s.sts.Name, types.StrategicMergePatchType, p.bytes(), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("writing %s: %w", s.Ref(), err)
	}
	return nil
}

// Start freezes with OnDelete: the controller then never deletes a pod for its revision, and
// recreates a deleted pod from the new template.
func (s *statefulSet) Start(ctx context.Context, lock *Lock) error {
	if lock.PreviousImages == nil {
		lock.PreviousImages = templateImages(s.Template(), lock.Images)
		lock.PreviousStrategy = strategyJSON(s.sts.Spec.UpdateStrategy)
	}
	return s.patch(ctx, objectPatch{lock: lock, spec: map[string]any{
		"updateStrategy": map[string]any{"type": appsv1.OnDeleteStatefulSetStrategyType, "rollingUpdate": nil},
		"template":       templatePatch(s.Template(), lock.Images),
	}})
}

func (s *statefulSet) Retarget(ctx context.Context, lock *Lock) error {
	return s.patch(ctx, objectPatch{lock: lock, spec: map[string]any{"template": templatePatch(s.Template(), lock.Images)}})
}

func (s *statefulSet) SetLock(ctx context.Context, lock *Lock) error {
	return s.patch(ctx, objectPatch{lock: lock})
}

func (s *statefulSet) RevisionLabels(images map[string]string) (map[string]string, bool, error) {
	if !s.observed() || !templateHasImages(s.Template(), images) {
		return nil, false, nil
	}
	return map[string]string{revisionLabel: s.sts.Status.UpdateRevision}, true, nil
}

func (s *statefulSet) Counted(pod *corev1.Pod, images, labels map[string]string) bool {
	return podHasImages(pod, images) && hasLabels(pod, labels)
}

func (s *statefulSet) Finalize(ctx context.Context, lock *Lock) (bool, error) {
	if s.lock != nil && s.lock.Phase == LockSucceeded {
		return true, nil
	}
	strategy, err := restoreStrategy(lock.PreviousStrategy)
	if err != nil {
		return false, err
	}
	lock.Phase = LockSucceeded
	return true, s.patch(ctx, objectPatch{lock: lock, spec: map[string]any{
		"updateStrategy": strategy,
		"template":       templatePatch(s.Template(), lock.Images),
	}})
}

// Restore puts back the template and the strategy in one write, so the controller never sees
// the original strategy with pods at a revision other than the template's.
func (s *statefulSet) Restore(ctx context.Context, lock *Lock) (bool, error) {
	if s.lock != nil && s.lock.Phase == LockRolledBack {
		return true, nil
	}
	strategy, err := restoreStrategy(lock.PreviousStrategy)
	if err != nil {
		return false, err
	}
	lock.Phase = LockRolledBack
	return true, s.patch(ctx, objectPatch{lock: lock, spec: map[string]any{
		"updateStrategy": strategy,
		"template":       templatePatch(s.Template(), lock.PreviousImages),
	}})
}
