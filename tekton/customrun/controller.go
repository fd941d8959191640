package customrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	"github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	"github.com/tektoncd/pipeline/pkg/client/informers/externalversions"
	listers "github.com/tektoncd/pipeline/pkg/client/listers/pipeline/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// resync lists every run again now and then, so that a run whose timer was lost (its
	// requeue is kept in memory only) is looked at anyway.
	resync = 5 * time.Minute
	// Retry pacing of a run whose step failed with an error worth a retry.
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// Options configure a Controller.
type Options struct {
	// Namespace limits the runs watched to one namespace; empty watches all.
	Namespace string
	// Workers is how many runs are reconciled at once [DefaultWorkers].
	Workers int
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Controller reconciles the CustomRuns of our kind: a shared informer lists and watches them, a
// rate-limited queue hands each run to one worker at a time, and the Reconciler takes its steps.
type Controller struct {
	reconciler *Reconciler
	informer   cache.SharedIndexInformer
	lister     listers.CustomRunLister
	queue      workqueue.TypedRateLimitingInterface[string]
	workers    int
	log        *slog.Logger
	synced     atomic.Bool
	// namespace is the scope of the runs watched, and of the locks scanned; empty is all.
	namespace string
	// orphanQueue holds, by target, the rollbacks of the rollouts of deleted runs (orphans.go);
	// orphans keeps where each is.
	orphanQueue workqueue.TypedRateLimitingInterface[rollout.Ref]
	orphans     orphans
	// deleted asks the scan loop for a scan: a run of ours was deleted.
	deleted chan struct{}
	// scanEvery is the pace of the scan without deletions.
	scanEvery time.Duration
}

// New builds a controller; Run starts it. engine drives the rollouts; specs reads the
// InPlaceRollout objects runs reference.
func New(tekton versioned.Interface, engine *rollout.Engine, specs SpecGetter, opts Options) *Controller {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	factory := externalversions.NewSharedInformerFactoryWithOptions(tekton, resync, externalversions.WithNamespace(opts.Namespace))
	runs := factory.Tekton().V1beta1().CustomRuns()
	c := &Controller{
		reconciler: &Reconciler{Engine: engine, Runs: tekton.TektonV1beta1(), Specs: specs, Log: log, Now: opts.Now},
		informer:   runs.Informer(),
		lister:     runs.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](firstBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "customruns"}),
		workers:   workers,
		log:       log,
		namespace: opts.Namespace,
		orphanQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[rollout.Ref](firstBackoff, maxBackoff),
			workqueue.TypedRateLimitingQueueConfig[rollout.Ref]{Name: "orphaned-rollouts"}),
		deleted: make(chan struct{}, 1),
		// With the resync of the runs: a deletion missed (the watch reconnecting, the process
		// not leading then) is found within the same time as a run's lost timer.
		scanEvery: resync,
	}
	return c
}

// Synced reports whether the runs have been listed.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watch lists and watches the runs until ctx ends, without reconciling them: a replica that does
// not lead keeps its cache warm. It returns once the runs are listed.
func (c *Controller) Watch(ctx context.Context) error {
	if _, err := c.informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			run, ok := obj.(*v1beta1.CustomRun)
			return ok && ours(run)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		},
	}); err != nil {
		return fmt.Errorf("watching CustomRuns: %w", err)
	}
	// Apart from the handler above: its filter drops the tombstone of a deletion the watch missed.
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.runDeleted}); err != nil {
		return fmt.Errorf("watching CustomRun deletions: %w", err)
	}
	go c.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("listing CustomRuns: %w", errors.Join(ctx.Err(), errors.New("the cache did not sync")))
	}
	c.synced.Store(true)
	return nil
}

// Reconcile runs the workers, and the scan for the rollouts of deleted runs with its worker,
// until ctx ends. Watch must have returned first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.log.Info("reconciling CustomRuns", "apiVersion", v1alpha1.APIVersion, "kind", v1alpha1.Kind, "workers", c.workers)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
		c.orphanQueue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	// One worker: deleted runs' rollouts are rare, and each step is bounded.
	wg.Go(func() {
		for c.nextOrphan(ctx) {
		}
	})
	wg.Go(func() { c.scanLoop(ctx) })
	wg.Wait()
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

// next reconciles the next run of the queue; false once the queue shut down.
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
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.queue.Forget(key)
		return true
	}
	run, err := c.lister.CustomRuns(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.queue.Forget(key)
		return true
	}
	if err != nil {
		c.queue.AddRateLimited(key)
		return true
	}
	requeue, err := c.reconciler.Reconcile(ctx, run)
	if err != nil {
		log := c.log.With("customrun", key)
		var re *rollout.StepError
		if errors.As(err, &re) {
			log = log.With(re.LogAttrs()...)
		}
		log.Warn("step failed, retrying", "error", err.Error())
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if requeue > 0 {
		c.queue.AddAfter(key, requeue)
	}
	return true
}
