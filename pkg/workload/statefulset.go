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

// revisionLabel is the pod label both the StatefulSet and the DaemonSet controllers judge a pod's
// revision by (never its images).
const revisionLabel = appsv1.ControllerRevisionHashLabelKey

type statefulSet struct {
	*onDelete
	sts  *appsv1.StatefulSet
	pods []*corev1.Pod
}

func (s *statefulSet) PodSelector() labels.Selector { return selectorOf(s.sts.Spec.Selector) }

func loadStatefulSet(ctx context.Context, client kubernetes.Interface, lister PodLister, ref Ref) (*statefulSet, error) {
	sts, err := client.AppsV1().StatefulSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	lock, err := parseLock(StatefulSet, sts.Namespace, sts.Name, sts.Annotations)
	if err != nil {
		return nil, err
	}
	owned, err := ownedPods(ctx, lister, sts.Namespace, sts.Spec.Selector, sts.UID)
	if err != nil {
		return nil, err
	}
	// Pods whose ordinals are past the replicas are being scaled away: the controller deletes
	// them, highest first, so they are not the rollout's.
	first, replicas := 0, 1
	if sts.Spec.Ordinals != nil {
		first = int(sts.Spec.Ordinals.Start)
	}
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	pods := byOrdinalDesc(owned, first, first+replicas)
	return &statefulSet{
		onDelete: &onDelete{
			ref:  Ref{Kind: StatefulSet, Namespace: sts.Namespace, Name: sts.Name},
			lock: lock, template: &sts.Spec.Template, strategy: sts.Spec.UpdateStrategy,
			onDeleteType: string(appsv1.OnDeleteStatefulSetStrategyType),
			observed:     versionOf(sts),
			write: func(ctx context.Context, pt types.PatchType, patch []byte, opts metav1.PatchOptions) error {
				_, err := client.AppsV1().StatefulSets(sts.Namespace).Patch(ctx, sts.Name, pt, patch, opts)
				return err
			},
			read: func(ctx context.Context) (objectVersion, error) {
				now, err := client.AppsV1().StatefulSets(sts.Namespace).Get(ctx, sts.Name, metav1.GetOptions{})
				if err != nil {
					return objectVersion{}, fmt.Errorf("reading StatefulSet %s/%s again: %w", sts.Namespace, sts.Name, err)
				}
				return versionOf(now), nil
			},
		},
		sts: sts, pods: pods,
	}, nil
}

func (s *statefulSet) Pods() []*corev1.Pod { return s.pods }

func (s *statefulSet) Replicas() int {
	if s.sts.Spec.Replicas == nil {
		return 1
	}
	return int(*s.sts.Spec.Replicas)
}

func (s *statefulSet) observed() bool {
	return s.sts.Status.ObservedGeneration >= s.sts.Generation && s.sts.Status.UpdateRevision != ""
}

func (s *statefulSet) CheckStart(ch Change, includeInit bool) error {
	if err := CheckChange(s, ch, includeInit); err != nil {
		return err
	}
	if !s.observed() {
		return &NotReadyError{fmt.Sprintf("%s: the StatefulSet controller has not observed generation %d yet", s.Ref(), s.sts.Generation)}
	}
	for _, p := range s.pods {
		if rev := p.Labels[revisionLabel]; rev != s.sts.Status.UpdateRevision {
			return &InvalidError{Msg: fmt.Sprintf("%s has an unfinished rollout: pod %s is at revision %s, not the template's %s; finish or undo it first",
				s.Ref(), p.Name, rev, s.sts.Status.UpdateRevision)}
		}
	}
	return nil
}

func (s *statefulSet) RevisionLabels(ch Change) (map[string]string, bool, error) {
	if !s.observed() || !TemplateHas(s.Template(), ch) {
		return nil, false, nil
	}
	return map[string]string{revisionLabel: s.sts.Status.UpdateRevision}, true, nil
}

func (s *statefulSet) Counted(pod *corev1.Pod, ch Change, labels map[string]string) bool {
	return Runs(pod, ch) && hasLabels(pod, labels)
}

func (s *statefulSet) Object() (corev1.ObjectReference, bool) {
	return objectRef(StatefulSet, &s.sts.ObjectMeta), true
}
