package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/internal/keyqueue"
	"github.com/inplace-rollout/inplace-rollout/internal/orphan"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// resync lists every workload and policy again now and then, so that a workload whose timer
	// was lost (its requeue is kept in memory only) is looked at anyway.
	resync = 5 * time.Minute
)

// Options configure a Controller.
type Options struct {
	// Namespace limits the workloads and policies watched to one namespace; empty watches all.
	Namespace string
	// Workers is how many workloads are reconciled at once [DefaultWorkers].
	Workers int
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Controller rolls out, in place, the templates of the StatefulSets and DaemonSets that name an
// InPlaceRolloutPolicy: shared informers list and watch the workloads and the policies, a
// rate-limited queue hands each workload (key KIND/NAMESPACE/NAME) to one worker at a time, and
// the Reconciler takes its steps. A scan finds the rollouts of policies deleted in flight and
// rolls them back.
type Controller struct {
	reconciler *Reconciler
	workloads  []cache.SharedIndexInformer
	sts        appslisters.StatefulSetLister
	ds         appslisters.DaemonSetLister
	policies   cache.SharedIndexInformer
	loop       *keyqueue.Loop[target]
	orphans    *orphan.Scanner
	workers    int
	log        *slog.Logger
	synced     atomic.Bool
}

// New builds a controller; Watch and Reconcile run it. engine drives the rollouts; kube reads
// the workloads, dyn the policies.
func New(kube kubernetes.Interface, dyn dynamic.Interface, engine *rollout.Engine, opts Options) *Controller {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	kf := informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(opts.Namespace))
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, resync, opts.Namespace, nil)
	c := &Controller{
		workloads: []cache.SharedIndexInformer{kf.Apps().V1().StatefulSets().Informer(), kf.Apps().V1().DaemonSets().Informer()},
		sts:       kf.Apps().V1().StatefulSets().Lister(),
		ds:        kf.Apps().V1().DaemonSets().Lister(),
		policies:  df.ForResource(Resource).Informer(),
		workers:   workers,
		log:       log,
	}
	c.reconciler = &Reconciler{Engine: engine, Kube: kube, Policies: dyn, Policy: c.policy, PoliciesIn: c.policiesIn, Log: log, Now: opts.Now}
	c.loop = &keyqueue.Loop[target]{Queue: keyqueue.NewQueue("inplacerolloutpolicy-workloads"), Get: c.get,
		Reconcile: c.reconciler.Reconcile, LogKey: "workload", Log: log}
	c.orphans = orphan.New(orphan.Config{Kind: v1alpha1.PolicyKind, Prefix: HolderPrefix, Namespace: opts.Namespace, Engine: engine, Log: log,
		Get: c.policyUID, Every: resync})
	return c
}

// Synced reports whether the workloads and policies have been listed.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watch lists and watches the workloads and policies until ctx ends, without reconciling: a
// replica that does not lead keeps its cache warm. It returns once they are listed.
func (c *Controller) Watch(ctx context.Context) error {
	for _, inf := range c.workloads {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.workloadChanged(nil, obj) },
			UpdateFunc: c.workloadChanged,
			DeleteFunc: func(obj any) { c.workloadChanged(obj, nil) },
		}); err != nil {
			return fmt.Errorf("watching workloads: %w", err)
		}
	}
	if _, err := c.policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.policyChanged,
		// A new spec only: the controller's own status writes change nothing to decide on.
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*unstructured.Unstructured)
			n, ok2 := obj.(*unstructured.Unstructured)
			if ok1 && ok2 && o.GetGeneration() != n.GetGeneration() {
				c.policyChanged(obj)
			}
		},
		DeleteFunc: func(obj any) {
			// Its rollouts in flight are left to the scan.
			c.orphans.Deleted()
			c.policyChanged(obj)
		},
	}); err != nil {
		return fmt.Errorf("watching %s objects: %w", v1alpha1.PolicyKind, err)
	}
	synced := []cache.InformerSynced{c.policies.HasSynced}
	go c.policies.Run(ctx.Done())
	for _, inf := range c.workloads {
		go inf.Run(ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("listing StatefulSets, DaemonSets and %s objects: %w", v1alpha1.PolicyKind, errors.Join(ctx.Err(), errors.New("the caches did not sync")))
	}
	c.synced.Store(true)
	return nil
}

// Reconcile runs the workers, and the scan for the rollouts of deleted policies, until ctx
// ends. Watch must have returned first.
func (c *Controller) Reconcile(ctx context.Context) {
	c.log.Info("reconciling workloads under policies", "apiVersion", v1alpha1.APIVersion, "kind", v1alpha1.PolicyKind, "workers", c.workers)
	var wg sync.WaitGroup
	wg.Go(func() { c.loop.Run(ctx, c.workers) })
	wg.Go(func() { c.orphans.Run(ctx) })
	wg.Wait()
}

// workloadChanged queues a StatefulSet or DaemonSet that names a policy, or named one (its
// rollout in flight is then taken back).
func (c *Controller) workloadChanged(old, obj any) {
	for _, o := range []any{old, obj} {
		if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if key, ok := keyOf(o); ok {
			c.loop.Queue.Add(key)
			return
		}
	}
}

// keyOf is the queue key of obj, a StatefulSet or DaemonSet that names a policy or carries a
// rollout lock.
func keyOf(obj any) (string, bool) {
	var (
		kind workload.Kind
		meta *metav1.ObjectMeta
	)
	switch v := obj.(type) {
	case *appsv1.StatefulSet:
		kind, meta = workload.StatefulSet, &v.ObjectMeta
	case *appsv1.DaemonSet:
		kind, meta = workload.DaemonSet, &v.ObjectMeta
	default:
		return "", false
	}
	_, named := meta.Annotations[v1alpha1.PolicyAnnotation]
	lock := meta.Annotations[workload.LockAnnotation]
	if !named && !strings.Contains(lock, `"holder":"`+HolderPrefix) {
		return "", false
	}
	return string(kind) + "/" + meta.Namespace + "/" + meta.Name, true
}

// policyChanged queues every workload of the policy's namespace that names it, and every
// workload its status has an entry of (one that named it before, whose entry goes).
func (c *Controller) policyChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	ns, name := u.GetNamespace(), u.GetName()
	if p, err := fromUnstructured(u); err == nil {
		for _, e := range p.Status.Workloads {
			c.loop.Queue.Add(e.Kind + "/" + ns + "/" + e.Name)
		}
	}
	stss, _ := c.sts.StatefulSets(ns).List(labels.Everything())
	for _, s := range stss {
		if s.Annotations[v1alpha1.PolicyAnnotation] == name {
			c.workloadChanged(nil, s)
		}
	}
	dss, _ := c.ds.DaemonSets(ns).List(labels.Everything())
	for _, d := range dss {
		if d.Annotations[v1alpha1.PolicyAnnotation] == name {
			c.workloadChanged(nil, d)
		}
	}
}

// get reads the workload of key from the cache: its reference and the policy it names.
func (c *Controller) get(key string) (target, bool, error) {
	kind, rest, _ := strings.Cut(key, "/")
	ns, name, ok := strings.Cut(rest, "/")
	if !ok {
		return target{}, false, nil
	}
	ref := workload.Ref{Kind: workload.Kind(kind), Namespace: ns, Name: name}
	var (
		meta *metav1.ObjectMeta
		err  error
	)
	switch ref.Kind {
	case workload.StatefulSet:
		var s *appsv1.StatefulSet
		if s, err = c.sts.StatefulSets(ns).Get(name); err == nil {
			meta = &s.ObjectMeta
		}
	case workload.DaemonSet:
		var d *appsv1.DaemonSet
		if d, err = c.ds.DaemonSets(ns).Get(name); err == nil {
			meta = &d.ObjectMeta
		}
	default:
		return target{}, false, nil
	}
	switch {
	case apierrors.IsNotFound(err):
		// Reconciled all the same: its entry in a policy's status goes.
		return target{ref: ref}, true, nil
	case err != nil:
		return target{}, false, err
	}
	return target{ref: ref, policy: meta.Annotations[v1alpha1.PolicyAnnotation]}, true, nil
}

// policy is the policy ns/name in the cache, if it is there.
func (c *Controller) policy(ns, name string) (*unstructured.Unstructured, bool) {
	item, exists, err := c.policies.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return nil, false
	}
	u, ok := item.(*unstructured.Unstructured)
	return u, ok
}

// policiesIn are the policies of namespace ns in the cache.
func (c *Controller) policiesIn(ns string) []*unstructured.Unstructured {
	items, err := c.policies.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return nil
	}
	policies := make([]*unstructured.Unstructured, 0, len(items))
	for _, item := range items {
		if u, ok := item.(*unstructured.Unstructured); ok {
			policies = append(policies, u)
		}
	}
	return policies
}

// policyUID is the UID of the policy ns/name in the cache, if it is there.
func (c *Controller) policyUID(ns, name string) (types.UID, bool) {
	u, ok := c.policy(ns, name)
	if !ok {
		return "", false
	}
	return u.GetUID(), true
}
