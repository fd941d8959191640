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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/internal/keyqueue"
	"github.com/inplace-rollout/inplace-rollout/internal/orphan"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// resync lists every run again now and then, so that a run whose timer was lost (its
	// requeue is kept in memory only) is looked at anyway.
	resync = 5 * time.Minute
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
// A scan finds the rollouts of runs deleted without their finalizer and rolls them back.
type Controller struct {
	reconciler *Reconciler
	informer   cache.SharedIndexInformer
	lister     listers.CustomRunLister
	loop       *keyqueue.Loop[*v1beta1.CustomRun]
	workers    int
	log        *slog.Logger
	synced     atomic.Bool
	orphans    *orphan.Scanner
}

// New builds a controller; Watch and Reconcile run it. engine drives the rollouts; specs reads
// the InPlaceRollout objects runs reference.
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
		workers:    workers,
		log:        log,
	}
	c.loop = &keyqueue.Loop[*v1beta1.CustomRun]{Queue: keyqueue.NewQueue("customruns"), Get: c.get,
		Reconcile: c.reconciler.Reconcile, LogKey: "customrun", Log: log}
	c.orphans = orphan.New(orphan.Config{Kind: "CustomRun", Prefix: HolderPrefix, Namespace: opts.Namespace, Engine: engine, Log: log,
		Get: c.uid,
		// With the resync of the runs: a deletion missed (the watch reconnecting, the process
		// not leading then) is found within the same time as a run's lost timer.
		Every: resync})
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
			AddFunc:    c.loop.Enqueue,
			UpdateFunc: func(_, obj any) { c.loop.Enqueue(obj) },
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

// Reconcile runs the workers, and the scan for the rollouts of deleted runs, until ctx ends.
// Watch must have returned first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.log.Info("reconciling CustomRuns", "apiVersion", v1alpha1.APIVersion, "kind", v1alpha1.Kind, "workers", c.workers)
	var wg sync.WaitGroup
	wg.Go(func() { c.loop.Run(ctx, c.workers) })
	wg.Go(func() { c.orphans.Run(ctx) })
	wg.Wait()
}

// get reads the run of key from the cache.
func (c *Controller) get(key string) (*v1beta1.CustomRun, bool, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, false, nil
	}
	run, err := c.lister.CustomRuns(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return run, true, nil
}

// uid is the UID of the run ns/name in the cache, if it is there.
func (c *Controller) uid(ns, name string) (types.UID, bool) {
	run, err := c.lister.CustomRuns(ns).Get(name)
	if err != nil {
		// The lister's only error is NotFound.
		return "", false
	}
	return run.UID, true
}

// runDeleted asks for a scan when a run of ours is deleted: without its finalizer (removed by
// hand, or force-deleted) its rollout is left to the scan.
func (c *Controller) runDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if run, ok := obj.(*v1beta1.CustomRun); ok && ours(run) {
		c.orphans.Deleted()
	}
}
