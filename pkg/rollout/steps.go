package rollout

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// podState is a pod with its state annotation, read once.
type podState struct {
	pod   *corev1.Pod
	state *inplace.State
}

// stepConcurrency bounds the pod steps one Reconcile runs at once.
const stepConcurrency = 32

// stepPods takes one step on each pod, concurrently, and returns when to look again (soon if
// any pod was written or finished, else at the earliest time a pod asked for) and how many pods
// it wrote to. A pod that no longer exists is skipped. The first error is returned with its pod.
func stepPods(pods []*corev1.Pod, step func(*corev1.Pod) (inplace.Result, error)) (time.Duration, int, *corev1.Pod, error) {
	type outcome struct {
		res inplace.Result
		err error
	}
	out := make([]outcome, len(pods))
	sem := make(chan struct{}, stepConcurrency)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].res, out[i].err = step(p)
		}()
	}
	wg.Wait()
	requeue, wrote := idleRequeue, 0
	for i, o := range out {
		if o.res.Wrote {
			wrote++
		}
		switch {
		case apierrors.IsNotFound(o.err):
		case o.err != nil:
			return 0, wrote, pods[i], o.err
		case o.res.Done:
			// A pod finished: the batch may be complete, and the next one can start now.
			requeue = minRequeue
		case o.res.Wrote && requeue > busyRequeue:
			requeue = busyRequeue
		case o.res.RequeueAfter > 0 && o.res.RequeueAfter < requeue:
			requeue = o.res.RequeueAfter
		}
	}
	return requeue, wrote, nil, nil
}
