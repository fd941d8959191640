package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// FoundLock is a lock found on the cluster, and the workload it is on.
type FoundLock struct {
	Ref  Ref
	Lock *Lock
}

// SelectorAnnotation names, on the ConfigMap holding the lock of label-selected pods, the
// selector it is the lock of.
const SelectorAnnotation = "inplace-rollout.io/selector"

// ListLocks lists the locks in namespace (every namespace when it is empty): those of
// StatefulSets, DaemonSets, Deployments and label-selected pods, finished or not. It is how a
// driver finds the rollouts of holders that no longer exist. The lists are served from the API
// server's watch cache (resourceVersion 0), since a driver runs this periodically over the whole
// cluster. A lock that cannot be read is left out and reported in the error, joined, after the
// others are listed.
func ListLocks(ctx context.Context, client kubernetes.Interface, namespace string) ([]FoundLock, error) {
	cached := metav1.ListOptions{ResourceVersion: "0"}
	var (
		out  []FoundLock
		errs []error
	)
	add := func(ref Ref, meta *metav1.ObjectMeta) {
		if _, ok := meta.Annotations[LockAnnotation]; !ok {
			return
		}
		lock, err := parseLock(ref.Kind, meta.Namespace, meta.Name, meta.Annotations)
		if err != nil {
			errs = append(errs, err)
			return
		}
		out = append(out, FoundLock{Ref: ref, Lock: lock})
	}
	sts, err := client.AppsV1().StatefulSets(namespace).List(ctx, cached)
	if err != nil {
		return nil, fmt.Errorf("listing StatefulSets for their rollout locks: %w", err)
	}
	for i := range sts.Items {
		o := &sts.Items[i]
		add(Ref{Kind: StatefulSet, Namespace: o.Namespace, Name: o.Name}, &o.ObjectMeta)
	}
	dss, err := client.AppsV1().DaemonSets(namespace).List(ctx, cached)
	if err != nil {
		return nil, fmt.Errorf("listing DaemonSets for their rollout locks: %w", err)
	}
	for i := range dss.Items {
		o := &dss.Items[i]
		add(Ref{Kind: DaemonSet, Namespace: o.Namespace, Name: o.Name}, &o.ObjectMeta)
	}
	deps, err := client.AppsV1().Deployments(namespace).List(ctx, cached)
	if err != nil {
		return nil, fmt.Errorf("listing Deployments for their rollout locks: %w", err)
	}
	for i := range deps.Items {
		o := &deps.Items[i]
		add(Ref{Kind: Deployment, Namespace: o.Namespace, Name: o.Name}, &o.ObjectMeta)
	}
	cms, err := client.CoreV1().ConfigMaps(namespace).List(ctx, cached)
	if err != nil {
		return nil, fmt.Errorf("listing ConfigMaps for the rollout locks of label-selected pods: %w", err)
	}
	for i := range cms.Items {
		o := &cms.Items[i]
		sel := o.Annotations[SelectorAnnotation]
		if !strings.HasPrefix(o.Name, lockConfigMapPrefix) || sel == "" || PodLockName(sel) != o.Name {
			continue
		}
		add(Ref{Kind: Pods, Namespace: o.Namespace, Selector: sel}, &o.ObjectMeta)
	}
	return out, errors.Join(errs...)
}
