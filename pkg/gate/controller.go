package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// ConditionReason is the reason of the condition the controller writes.
const ConditionReason = "NotUpdatingInPlace"

// Options configure the controller.
type Options struct {
	// Namespace limits the controller to one namespace; empty means all.
	Namespace string
	// Selector limits the controller to pods matching this label selector; empty means all.
	Selector string
	// Workers is how many pods are handled at once; 0 means 1.
	Workers int
	// Resync is how often every pod is looked at again; 0 means 10 minutes.
	Resync time.Duration
	// Logger receives one line per pod written, and the controller's start and stop. Nil discards.
	Logger *slog.Logger
}

// Controller sets the readiness gate condition True on pods that declare the gate and are not
// in the middle of an in-place update (Decide). Two running at once are harmless: every write
// carries the resourceVersion it was decided on, so the second one conflicts, reads the pod
// again and finds the condition set.
type Controller struct {
	client kubernetes.Interface
	opts   Options
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
	pods   corelisters.PodLister
	synced atomic.Bool
	now    func() time.Time
}

// New checks the options and builds a controller; Run starts it.
func New(client kubernetes.Interface, opts Options) (*Controller, error) {
	if _, err := labels.Parse(opts.Selector); err != nil {
		return nil, fmt.Errorf("parsing the label selector %q: %w", opts.Selector, err)
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Controller{client: client, opts: opts, log: log, now: time.Now}, nil
}

// Run is New and then Controller.Run.
func Run(ctx context.Context, client kubernetes.Interface, opts Options) error {
	c, err := New(client, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Synced reports whether the controller has listed the pods and is handling them.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Run watches pods and sets the gate until ctx ends. It returns an error at once when it may
// not list pods; later trouble with the apiserver is retried.
func (c *Controller) Run(ctx context.Context) error {
	// The informer would retry a refused list forever, quietly; a missing permission is better
	// said once, up front.
	if _, err := c.client.CoreV1().Pods(c.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: c.opts.Selector, Limit: 1}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listing pods in %s (the controller needs get, list and watch on pods, and patch on pods/status): %w", nsName(c.opts.Namespace), err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, c.opts.Resync,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = c.opts.Selector }))
	informer := factory.Core().V1().Pods()
	c.pods = informer.Lister()
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "inplace-rollout-gate"})
	defer c.queue.ShutDown()
	// Only pods the controller would write are queued; the worker decides again on what it reads.
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			if set, _ := Decide(pod); set {
				c.queue.Add(pod.Namespace + "/" + pod.Name)
			}
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	c.log.Info("gate controller starting", "namespace", nsName(c.opts.Namespace), "selector", c.opts.Selector, "condition", string(inplace.ReadinessGate))
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return nil // ctx ended before the pods were listed
	}
	c.synced.Store(true)
	c.log.Info("gate controller watching pods")
	for range c.opts.Workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	<-ctx.Done()
	c.log.Info("gate controller stopping")
	return nil
}

func nsName(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// work handles queued pods until the queue shuts down.
func (c *Controller) work(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(ctx, key); err != nil && ctx.Err() == nil {
			c.log.Warn("setting the readiness gate failed; retrying", "pod", key, "err", err)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// conflictRetries bounds the re-reads after a write conflict before the pod goes back to the queue.
const conflictRetries = 5

// sync decides on the cached pod and writes the condition if needed. On a conflict (the pod
// changed since it was read) it reads the pod from the apiserver and decides again.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this controller made
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod %s from the cache: %w", key, err)
	}
	for attempt := 0; ; attempt++ {
		set, reason := Decide(pod)
		if !set {
			return nil
		}
		err := c.setGate(ctx, pod, reason)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		if attempt == conflictRetries {
			return fmt.Errorf("pod %s changed on each of %d attempts to set its readiness gate: %w", key, attempt+1, err)
		}
		if pod, err = c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("reading pod %s again after a conflict: %w", key, err)
		}
	}
}

// setGate writes the condition True with a strategic-merge patch on pods/status (conditions
// merge by type, so the others stay) carrying the resourceVersion and UID the decision was made
// on: a pod changed since, or replaced by one of the same name, makes the write conflict.
func (c *Controller) setGate(ctx context.Context, pod *corev1.Pod, reason string) error {
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": pod.ResourceVersion, "uid": string(pod.UID)},
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type:               inplace.ReadinessGate,
			Status:             corev1.ConditionTrue,
			Reason:             ConditionReason,
			Message:            "set by the inplace-rollout gate controller: " + reason,
			LastTransitionTime: metav1.NewTime(c.now().Truncate(time.Second)),
		}}},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encoding the status patch of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("setting condition %s True on pod %s/%s: %w", inplace.ReadinessGate, pod.Namespace, pod.Name, err)
	}
	c.log.Info("readiness gate set", "pod", pod.Namespace+"/"+pod.Name, "condition", string(inplace.ReadinessGate), "why", reason)
	return nil
}
