package workload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// WatchPods watches the pods sel selects in namespace and, after each change, leaves a value
// on the returned channel (at most one waits there). It is a hint that a step may have
// something new to do, never a fact a step relies on: steps read the API server. The watch
// keeps only the pods' names, and ends with ctx.
func WatchPods(ctx context.Context, client kubernetes.Interface, namespace string, sel labels.Selector) (<-chan struct{}, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	// One watch first, so that a caller not allowed to watch pods hears it now, not from the
	// informer's retries.
	probe, err := client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel.String(), TimeoutSeconds: ptr.To[int64](1)})
	if err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	probe.Stop()
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}}, nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	go inf.RunWithContext(ctx)
	return changed, nil
}
