package benchreport

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podWatch follows a namespace's pods and EndpointSlices through watches, so that waiting for a
// rollout's end costs the apiserver nothing but those watches, and records when each pod turned
// Ready or not and in or out of its Service's EndpointSlices.
type podWatch struct {
	lister listersv1.PodLister
	// ready records each pod's turns Ready and not.
	ready     *presence
	endpoints *endpoints
}

func watchPods(ctx context.Context, client kubernetes.Interface, namespace string) (*podWatch, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	w := &podWatch{lister: f.Core().V1().Pods().Lister(), ready: newPresence()}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(podHandler(w.ready)); err != nil {
		return nil, fmt.Errorf("watching pods of namespace %s: %w", namespace, err)
	}
	slices := f.Discovery().V1().EndpointSlices()
	w.endpoints = &endpoints{lister: slices.Lister(), listed: newPresence(), ready: map[string]map[string]types.UID{}}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.endpoints.sync, UpdateFunc: func(_, obj any) { w.endpoints.sync(obj) }, DeleteFunc: w.endpoints.sync,
	}); err != nil {
		return nil, fmt.Errorf("watching EndpointSlices of namespace %s: %w", namespace, err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("watching pods of namespace %s: the %v cache did not sync", namespace, typ)
		}
	}
	return w, nil
}

// pods lists the pods labelled app=app.
func (w *podWatch) pods(app string) []*corev1.Pod {
	pods, _ := w.lister.List(labels.SelectorFromSet(labels.Set{"app": app}))
	return pods
}

// uids are the UIDs of the pods labelled app=app.
func (w *podWatch) uids(app string) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, p := range w.pods(app) {
		out[p.UID] = true
	}
	return out
}

// allOn reports whether exactly n pods are labelled app=app, none of them terminating, each
// Ready with its container "app" specified as and running image.
func (w *podWatch) allOn(app string, n int, image string) bool {
	pods := w.pods(app)
	if len(pods) != n {
		return false
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !readyOn(p, image) {
			return false
		}
	}
	return true
}

func readyOn(p *corev1.Pod, image string) bool {
	specOK, statusOK, ready := false, false, false
	for _, c := range p.Spec.Containers {
		specOK = specOK || (c.Name == "app" && c.Image == image)
	}
	for _, s := range p.Status.ContainerStatuses {
		statusOK = statusOK || (s.Name == "app" && s.Image == image && s.Ready)
	}
	for _, c := range p.Status.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	return specOK && statusOK && ready
}

// waitAllOn waits until allOn holds, looking every 20 ms.
func (w *podWatch) waitAllOn(ctx context.Context, app string, n int, image string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !w.allOn(app, n, image) {
		select {
		case <-ctx.Done():
			ready := 0
			for _, p := range w.pods(app) {
				if p.DeletionTimestamp == nil && readyOn(p, image) {
					ready++
				}
			}
			return fmt.Errorf("waiting %s for the %d pods app=%s to run %s: %d of %d pods there are Ready on it",
				timeout, n, app, image, ready, len(w.pods(app)))
		case <-tick.C:
		}
	}
	return nil
}
