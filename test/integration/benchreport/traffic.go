package benchreport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// What users of a workload feel during its rollout, beside its wall time: per pod, the time it
// was not Ready and the time no EndpointSlice of its Service listed it ready; and requests sent
// as kube-proxy routes them, to a pod the slices listed ready when it last synced, that found
// the pod not serving.

// edge is a pod's turn in (Ready, or listed ready) or out, when the watch delivered it.
type edge struct {
	at time.Time
	in bool
}

// presence records, per pod name, when the pod turned in or out. A name never recorded is out.
type presence struct {
	mu    sync.Mutex
	edges map[string][]edge // by pod name
	app   map[string]string // the label app of each pod name
}

func newPresence() *presence {
	return &presence{edges: map[string][]edge{}, app: map[string]string{}}
}

// set records that pod name of app is in or out at at, when that is a turn.
func (p *presence) set(name, app string, in bool, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	es := p.edges[name]
	if (len(es) == 0 && !in) || (len(es) > 0 && es[len(es)-1].in == in) {
		return
	}
	p.edges[name] = append(es, edge{at: at, in: in})
	p.app[name] = app
}

// outTimes are, per pod of app, the time it was out from t0 to t1 (see outTimes).
func (p *presence) outTimes(app string, t0, t1 time.Time, paired bool) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	byName := map[string][]edge{}
	for name, es := range p.edges {
		if p.app[name] == app {
			byName[name] = es
		}
	}
	return outTimes(byName, t0, t1, paired)
}

// outTimes are, for each pod in at t0 in edges (by pod name), the time it was out from t0 to
// t1 (in meaning in just before t0): the sum of its turns out, a turn still out at t1 ending
// there. paired is for pods whose replacements have new names (a Deployment's): then each pod's
// first turn out after t0 is paired, in order of time, with the first turn in of the pods not
// in at t0, in order of time, and lasts until that turn in (or t1, when fewer pods came in).
func outTimes(edges map[string][]edge, t0, t1 time.Time, paired bool) []time.Duration {
	var out []time.Duration
	var leaves, joins []time.Time
	for _, es := range edges {
		inAtStart, after := false, es
		for len(after) > 0 && after[0].at.Before(t0) {
			inAtStart, after = after[0].in, after[1:]
		}
		if !inAtStart {
			if paired {
				if i := slices.IndexFunc(after, func(e edge) bool { return e.in && !e.at.After(t1) }); i >= 0 {
					joins = append(joins, after[i].at)
				}
			}
			continue
		}
		if paired {
			if i := slices.IndexFunc(after, func(e edge) bool { return !e.in && !e.at.After(t1) }); i >= 0 {
				leaves = append(leaves, after[i].at)
				continue
			}
		}
		out = append(out, timeOut(after, t0, t1))
	}
	slices.SortFunc(leaves, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(joins, func(a, b time.Time) int { return a.Compare(b) })
	for i, left := range leaves {
		back := t1
		if i < len(joins) {
			back = joins[i]
		}
		out = append(out, max(0, back.Sub(left)))
	}
	slices.Sort(out)
	return out
}

// timeOut is how long a pod in at t0 was out until t1, given its turns after t0.
func timeOut(after []edge, t0, t1 time.Time) time.Duration {
	var total time.Duration
	in, since := true, t0
	for _, e := range after {
		if e.at.After(t1) {
			break
		}
		if !e.in && in {
			since = e.at
		} else if e.in && !in {
			total += e.at.Sub(since)
		}
		in = e.in
	}
	if !in {
		total += t1.Sub(since)
	}
	return total
}

// podIn is whether a pod counts as in: not being deleted, and Ready.
func podIn(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podHandler feeds ready with the pods' turns.
func podHandler(ready *presence) cache.ResourceEventHandlerFuncs {
	seen := func(obj any, deleted bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		ready.set(p.Name, p.Labels["app"], !deleted && podIn(p), time.Now())
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, obj any) { seen(obj, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}
}

// endpoints follows the EndpointSlices of the namespace's Services, each named after the label
// app of the pods it selects: which pods they list ready, and when each turned in or out.
type endpoints struct {
	lister discoverylisters.EndpointSliceLister
	listed *presence

	mu    sync.Mutex
	ready map[string]map[string]types.UID // by Service: pod name to UID
}

// sync reads again the slices of the Service of slice, after a change to slice.
func (e *endpoints) sync(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := slice.Labels[discoveryv1.LabelServiceName]
	all, err := e.lister.EndpointSlices(slice.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc}))
	if err != nil {
		return
	}
	now := make(map[string]types.UID)
	for _, s := range all {
		for _, ep := range s.Endpoints {
			// A nil ready is to be read as ready (the EndpointConditions API).
			if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				now[ep.TargetRef.Name] = ep.TargetRef.UID
			}
		}
	}
	// The turns are recorded before the new set is seen, so that whoever sees every pod listed
	// finds every turn in recorded.
	at := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	before := e.ready[svc]
	e.ready[svc] = now
	for name := range now {
		if _, ok := before[name]; !ok {
			e.listed.set(name, svc, true, at)
		}
	}
	for name := range before {
		if _, ok := now[name]; !ok {
			e.listed.set(name, svc, false, at)
		}
	}
}

// targets are the UIDs of the pods the Service app lists ready, sorted.
func (e *endpoints) targets(app string) []types.UID {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]types.UID, 0, len(e.ready[app]))
	for _, uid := range e.ready[app] {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}

// The simulated request load: loadRPS requests a second over the Service's pods, in turn, to the
// pods its EndpointSlices listed ready when the load last synced, every proxySync, as kube-proxy
// syncs its rules at most once a second (--iptables-min-sync-period, 1 s by default).
const (
	loadRPS   = 1000
	proxySync = time.Second
	loadTick  = 10 * time.Millisecond
)

// load is a request load on one Service while a rollout runs.
type load struct {
	cancel       context.CancelFunc
	done         chan struct{}
	sent, failed atomic.Int64
}

// startLoad sends requests to the pods of Service app, each of which fails when serving says
// its pod does not serve (the simulated kubelet's truth), or when no pod is listed.
func (e *endpoints) startLoad(ctx context.Context, app string, serving func(types.UID) bool) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(loadTick)
		defer tick.Stop()
		targets, synced, last := e.targets(app), time.Now(), time.Now()
		due, next := 0.0, 0
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if now.Sub(synced) >= proxySync {
					targets, synced = e.targets(app), now
				}
				due += loadRPS * now.Sub(last).Seconds()
				last = now
				for ; due >= 1; due-- {
					l.sent.Add(1)
					if len(targets) == 0 {
						l.failed.Add(1)
						continue
					}
					next = (next + 1) % len(targets)
					if !serving(targets[next]) {
						l.failed.Add(1)
					}
				}
			}
		}
	}()
	return l
}

// snapshot is what the load sent so far, and how many failed.
func (l *load) snapshot() (sent, failed int) {
	return int(l.sent.Load()), int(l.failed.Load())
}

// stop ends the load and returns what it sent and how many failed.
func (l *load) stop() (sent, failed int) {
	l.cancel()
	<-l.done
	return l.snapshot()
}

// waitAllListed waits until the Service app lists n pods ready, looking every 20 ms.
func (e *endpoints) waitAllListed(ctx context.Context, app string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(e.targets(app)) != n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting %s for the EndpointSlices of Service %s to list its %d pods ready: they list %d",
				timeout, app, n, len(e.targets(app)))
		case <-tick.C:
		}
	}
	return nil
}

// createService creates the headless Service app, selecting the pods app=app, whose
// EndpointSlices kube-controller-manager keeps.
func (s *sizeRun) createService(ctx context.Context, app string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}
	if _, err := s.Client.CoreV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Service %s/%s: %w", s.ns, app, err)
	}
	return nil
}

// Quantiles are a distribution's p50, p99 and max.
type Quantiles struct{ P50, P99, Max time.Duration }

// quantilesOf are the quantiles of ds (nearest rank); zero for none.
func quantilesOf(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Quantiles{P50: rank(0.50), P99: rank(0.99), Max: ds[len(ds)-1]}
}
