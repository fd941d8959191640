package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// lockConfigMapPrefix starts the name of every ConfigMap holding the lock of a pod selector.
const lockConfigMapPrefix = "inplace-rollout-pods-"

// PodLockName names the ConfigMap holding the lock of a pod selector.
func PodLockName(selector string) string {
	sum := sha256.Sum256([]byte(selector))
	return lockConfigMapPrefix + hex.EncodeToString(sum[:])[:10]
}

// PodLock is a ConfigMap holding the lock of a pod selector, as listed.
type PodLock struct {
	Name, ResourceVersion string
	// Lock is the lock it holds; nil when its annotation is gone or cannot be read.
	Lock *Lock
}

// ListPodLocks lists the ConfigMaps in ns that hold the lock of a pod selector, so that the
// rollout can collect those that no longer record anything to act on.
func ListPodLocks(ctx context.Context, client kubernetes.Interface, ns string) ([]PodLock, error) {
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the ConfigMaps of %s for the locks of label-selected pods: %w", ns, err)
	}
	var out []PodLock
	for i := range cms.Items {
		cm := &cms.Items[i]
		if !strings.HasPrefix(cm.Name, lockConfigMapPrefix) {
			continue
		}
		lock, err := parseLock(Pods, cm.Namespace, cm.Name, cm.Annotations)
		if err != nil {
			lock = nil
		}
		out = append(out, PodLock{Name: cm.Name, ResourceVersion: cm.ResourceVersion, Lock: lock})
	}
	return out, nil
}

// DeletePodLock deletes the lock ConfigMap l of ns if it is still at the resourceVersion listed:
// a lock that changed since is left alone.
func DeletePodLock(ctx context.Context, client kubernetes.Interface, ns string, l PodLock) error {
	rv := l.ResourceVersion
	if err := client.CoreV1().ConfigMaps(ns).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		return fmt.Errorf("deleting ConfigMap %s/%s, the lock of pods no rollout records: %w", ns, l.Name, err)
	}
	return nil
}
