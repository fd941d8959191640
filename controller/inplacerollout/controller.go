package inplacerollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// resync lists every object again now and then, so that an object whose timer was lost
	// (its requeue is kept in memory only) is looked at anyway.
	resync = 5 * time.Minute
	// Retry pacing of an object whose step failed with an error worth a retry.
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// Options configure a Controller.
type Options struct {
	// Namespace limits the objects watched to one namespace; empty watches all.
	Namespace string
	// Workers is how many objects are reconciled at once [DefaultWorkers].
	Workers int
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Controller reconciles InPlaceRollout objects: a shared informer lists and watches them, a
// rate-limited queue hands each object to one worker at a time, and the Reconciler takes its
// steps.
type Controller struct {
	reconciler *Reconciler
	informer   cache.SharedIndexInformer
	queue      workqueue.TypedRateLimitingInterface[string]
	workers    int
	log        *slog.Logger
	synced     atomic.Bool
}

// New builds a controller; Watch and Reconcile run it. engine drives the rollouts; client reads
// and writes the objects.
func New(client dynamic.Interface, engine *rollout.Engine, opts Options) *Controller {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, resync, opts.Namespace, nil)
	return &Controller{
		reconciler: &Reconciler{Engine: engine, Client: client, Log: log, Now: opts.Now},
		informer:   factory.ForResource(Resource).Informer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](firstBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "inplacerollouts"}),
		workers: workers,
		log:     log,
	}
}

// Synced reports whether the objects have been listed.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watch lists and watches the objects until ctx ends, without reconciling them: a replica that
// does not lead keeps its cache warm. It returns once the objects are listed.
func (c *Controller) Watch(ctx context.Context) error {
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watching %s objects: %w", v1alpha1.Kind, err)
	}
	go c.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("listing %s objects: %w", v1alpha1.Kind, errors.Join(ctx.Err(), errors.New("the cache did not sync")))
	}
	c.synced.Store(true)
	return nil
}

// Reconcile runs the workers until ctx ends. Watch must have returned first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.log.Info("reconciling", "apiVersion", v1alpha1.APIVersion, "kind", v1alpha1.Kind, "workers", c.workers)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	// Objects listed before this replica led were queued then; the queue has kept them.
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	wg.Wait()
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

// next reconciles the next object of the queue; false once the queue shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if ctx.Err() != nil {
		// Stopping, or the Lease lost: the queue still hands out what it holds, but another
		// replica may lead now, so no step more.
		return false
	}
	item, exists, err := c.informer.GetStore().GetByKey(key)
	if err != nil {
		c.queue.AddRateLimited(key)
		return true
	}
	u, ok := item.(*unstructured.Unstructured)
	if !exists || !ok {
		c.queue.Forget(key)
		return true
	}
	requeue, err := c.reconciler.Reconcile(ctx, u)
	if err != nil {
		log := c.log.With("inplacerollout", key)
		var re *rollout.StepError
		if errors.As(err, &re) {
			log = log.With(re.LogAttrs()...)
		}
		if apierrors.IsConflict(err) {
			// The object changed since it was read: its update is queued already.
			log.Info("object changed during the step, deciding again", "error", err.Error())
		} else {
			log.Warn("step failed, retrying", "error", err.Error())
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if requeue > 0 {
		c.queue.AddAfter(key, requeue)
	}
	return true
}
