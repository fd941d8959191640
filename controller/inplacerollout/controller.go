package inplacerollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/internal/keyqueue"
	"github.com/inplace-rollout/inplace-rollout/internal/orphan"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// resync lists every object again now and then, so that an object whose timer was lost
	// (its requeue is kept in memory only) is looked at anyway.
	resync = 5 * time.Minute
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
// steps. A scan finds the rollouts of objects deleted without their finalizer and rolls them
// back.
type Controller struct {
	reconciler *Reconciler
	informer   cache.SharedIndexInformer
	loop       *keyqueue.Loop[*unstructured.Unstructured]
	workers    int
	log        *slog.Logger
	synced     atomic.Bool
	orphans    *orphan.Scanner
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
	c := &Controller{
		reconciler: &Reconciler{Engine: engine, Client: client, Log: log, Now: opts.Now},
		informer:   factory.ForResource(Resource).Informer(),
		workers:    workers,
		log:        log,
	}
	c.loop = &keyqueue.Loop[*unstructured.Unstructured]{Queue: keyqueue.NewQueue("inplacerollouts"), Get: c.get,
		Reconcile: c.reconciler.Reconcile, LogKey: "inplacerollout", Log: log}
	c.orphans = orphan.New(orphan.Config{Kind: v1alpha1.Kind, Prefix: HolderPrefix, Namespace: opts.Namespace, Engine: engine, Log: log,
		Get: c.uid,
		// With the resync of the objects: a deletion missed (the watch reconnecting, the
		// process not leading then) is found within the same time as an object's lost timer.
		Every: resync})
	return c
}

// Synced reports whether the objects have been listed.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watch lists and watches the objects until ctx ends, without reconciling them: a replica that
// does not lead keeps its cache warm. It returns once the objects are listed.
func (c *Controller) Watch(ctx context.Context) error {
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.loop.Enqueue,
		UpdateFunc: func(_, obj any) { c.loop.Enqueue(obj) },
		// Without its finalizer (removed by hand, or force-deleted), an object's rollout is
		// left to the scan.
		DeleteFunc: func(any) { c.orphans.Deleted() },
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

// Reconcile runs the workers, and the scan for the rollouts of deleted objects, until ctx ends.
// Watch must have returned first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.log.Info("reconciling", "apiVersion", v1alpha1.APIVersion, "kind", v1alpha1.Kind, "workers", c.workers)
	var wg sync.WaitGroup
	wg.Go(func() { c.loop.Run(ctx, c.workers) })
	wg.Go(func() { c.orphans.Run(ctx) })
	wg.Wait()
}

// get reads the object of key from the cache.
func (c *Controller) get(key string) (*unstructured.Unstructured, bool, error) {
	item, exists, err := c.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, false, err
	}
	u, ok := item.(*unstructured.Unstructured)
	return u, exists && ok, nil
}

// uid is the UID of the object ns/name in the cache, if it is there.
func (c *Controller) uid(ns, name string) (types.UID, bool) {
	u, exists, err := c.get(ns + "/" + name)
	if err != nil || !exists {
		return "", false
	}
	return u.GetUID(), true
}
