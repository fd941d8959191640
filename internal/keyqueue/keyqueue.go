// Package keyqueue is the worker loop of our controllers, as in client-go's sample-controller: a
// rate-limited workqueue of object keys (namespace/name), each handed to one worker at a time,
// read from the informer's cache and reconciled; an error is retried with backoff, a requeue
// asked for is honoured, and an object gone from the cache is forgotten.
package keyqueue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Retry pacing of an object whose step failed with an error worth a retry: FirstBackoff,
// doubled at each failure in a row, up to MaxBackoff.
const (
	FirstBackoff = time.Second
	MaxBackoff   = 30 * time.Second
)

// Loop reconciles the objects of its queue with workers.
type Loop[T any] struct {
	// Queue holds the keys; NewQueue makes it.
	Queue workqueue.TypedRateLimitingInterface[string]
	// Get reads the object of key from the cache: false when it is not there (deleted).
	Get func(key string) (T, bool, error)
	// Reconcile takes the object's next step and returns when to look again (0: when it
	// changes). A returned error is worth a retry.
	Reconcile func(context.Context, T) (time.Duration, error)
	// LogKey names the key in log lines ("customrun").
	LogKey string
	// Log receives one line per failed step.
	Log *slog.Logger
}

// NewQueue is a queue of keys, named name in its metrics.
func NewQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](FirstBackoff, MaxBackoff),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// Enqueue queues the key of obj, an object of an informer's event.
func (l *Loop[T]) Enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	l.Queue.Add(key)
}

// Run runs workers workers until ctx ends, then shuts the queue down and waits for them.
// Objects listed before this replica led were queued then; the queue has kept them.
func (l *Loop[T]) Run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		l.Queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for l.Next(ctx) {
			}
		})
	}
	wg.Wait()
}

// Next reconciles the next object of the queue; false once the queue shut down.
func (l *Loop[T]) Next(ctx context.Context) bool {
	key, quit := l.Queue.Get()
	if quit {
		return false
	}
	defer l.Queue.Done(key)
	if ctx.Err() != nil {
		// Stopping, or the Lease lost: the queue still hands out what it holds, but another
		// replica may lead now, so no step more.
		return false
	}
	obj, exists, err := l.Get(key)
	switch {
	case err != nil:
		l.Queue.AddRateLimited(key)
		return true
	case !exists:
		l.Queue.Forget(key)
		return true
	}
	requeue, err := l.Reconcile(ctx, obj)
	if err != nil {
		log := l.Log.With(l.LogKey, key)
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
		l.Queue.AddRateLimited(key)
		return true
	}
	l.Queue.Forget(key)
	if requeue > 0 {
		l.Queue.AddAfter(key, requeue)
	}
	return true
}
