package workload

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"
	"unique"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// PodLister lists the pods of a namespace that a selector selects: what Load reads a workload's
// pods with. Without one, Load lists them from the API server on every call. The pods it
// returns may be a cache's own: read-only.
type PodLister interface {
	ListPods(ctx context.Context, namespace string, sel labels.Selector) ([]*corev1.Pod, error)
}

// apiPods lists pods from the API server.
type apiPods struct{ client kubernetes.Interface }

func (a apiPods) ListPods(ctx context.Context, namespace string, sel labels.Selector) ([]*corev1.Pod, error) {
	list, err := a.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// PodWatch is a watch of the pods a selector selects in a namespace (WatchPods): a signal after
// each change, and a PodLister that answers from the watch's cache instead of a LIST.
//
// The cache may lag the API server by the time an update takes to arrive; a step that reads a
// pod from it and writes it carries the resourceVersion it read, so a stale pod costs a conflict
// and a fresh read of that pod (inplace.Updater), never a wrong write. The writes this process
// makes itself do not lag: told of each (Wrote), the watch answers with the pod as written until
// it brings a newer version, so that the step after a write does not decide on the pod as it was.
type PodWatch struct {
	changes   chan struct{}
	informer  cache.SharedIndexInformer
	written   cache.MutationCache
	client    kubernetes.Interface
	namespace string
	sel       labels.Selector

	statesMu sync.Mutex
	states   map[weak.Pointer[corev1.Pod]]decodedState // by pod object (ReadState)
}

// WrittenPods is a PodLister that can be told of a pod this process wrote, to answer with it
// until its own view of the pod is as new (PodWatch).
type WrittenPods interface {
	Wrote(pod *corev1.Pod)
}

// writtenTTL bounds how long a written pod stands in for the watch's: the watch brings the
// write, or a newer version, well within it.
const writtenTTL = 30 * time.Second

// WatchPods watches the pods sel selects in namespace until ctx ends. The watch starts with one
// call, so that a caller not allowed to watch pods hears it now, not from the informer's
// retries.
func WatchPods(ctx context.Context, client kubernetes.Interface, namespace string, sel labels.Selector) (*PodWatch, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	probe, err := client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel.String(), TimeoutSeconds: ptr.To[int64](1)})
	if err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	probe.Stop()
	w := &PodWatch{changes: make(chan struct{}, 1), client: client, namespace: namespace, sel: sel,
		states:   map[weak.Pointer[corev1.Pod]]decodedState{},
		informer: cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})}
	// The resourceVersions of one resource in one namespace are compared as integers, as the
	// API server's storage makes them.
	w.written = cache.NewIntegerResourceVersionMutationCache(klog.Background(), w.informer.GetStore(), nil, writtenTTL, false)
	// Managed fields are most of a pod's size and nothing here reads them.
	if err := w.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
			internAnnotations(p)
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.signal() },
		UpdateFunc: func(any, any) { w.signal() },
		DeleteFunc: func(any) { w.signal() },
	}); err != nil {
		return nil, fmt.Errorf("watching the pods %s of namespace %s: %w", sel, namespace, err)
	}
	go w.informer.RunWithContext(ctx)
	return w, nil
}

// Changes receives a value after each change to the pods (at most one waits there). It is a
// hint that a step may have something new to do.
func (w *PodWatch) Changes() <-chan struct{} { return w.changes }

// HasSynced reports whether the watch's cache holds every pod (its first list arrived).
func (w *PodWatch) HasSynced() bool { return w.informer.HasSynced() }

func (w *PodWatch) signal() {
	select {
	case w.changes <- struct{}{}:
	default:
	}
}

// ListPods answers from the watch's cache once it has synced, when the selector asked for
// selects among the pods watched (it has every requirement of the watch's selector, as a
// ReplicaSet's selector has its Deployment's); otherwise from the API server. The pods from the
// cache are its own, shared with the watch and every other caller: read-only, as a lister's
// are in client-go. Copying each pod at every step would cost more than the rest of the step
// at thousands of pods; a caller that changes a pod copies it first.
func (w *PodWatch) ListPods(ctx context.Context, namespace string, sel labels.Selector) ([]*corev1.Pod, error) {
	if namespace != w.namespace || !narrows(sel, w.sel) || !w.informer.HasSynced() {
		return apiPods{w.client}.ListPods(ctx, namespace, sel)
	}
	// Every pod of the cache matches the watch's own selector: only a narrower one is matched
	// pod by pod (a label lookup per requirement and pod was 5% of a step at 5,000 pods).
	all := sel.String() == w.sel.String()
	keys := w.informer.GetStore().ListKeys()
	pods := make([]*corev1.Pod, 0, len(keys))
	for _, key := range keys {
		obj, ok, err := w.written.GetByKey(key)
		if err != nil {
			return nil, fmt.Errorf("reading pod %s from the watch's cache: %w", key, err)
		}
		if p, isPod := obj.(*corev1.Pod); ok && isPod && (all || sel.Matches(labels.Set(p.Labels))) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// Wrote makes ListPods answer with pod, as a write returned it, until the watch brings a version
// as new. A pod the watch does not hold is not added.
func (w *PodWatch) Wrote(pod *corev1.Pod) {
	p := pod.DeepCopy()
	p.ManagedFields = nil
	internAnnotations(p)
	w.written.Mutation(p)
}

// internAnnotations makes each long annotation value of the pod the one canonical copy of its
// text, shared by every version of every pod that carries it. A rollout's steps look its state
// annotation up, by text, in a cache of decoded states at every step; two equal texts in one
// backing array compare at once, where two copies were compared byte by byte, a tenth of the
// command's CPU at 5,000 pods. Only the watch's own objects, as they arrive, are changed.
func internAnnotations(p *corev1.Pod) {
	for k, v := range p.Annotations {
		if len(v) >= internMin {
			p.Annotations[k] = unique.Make(v).Value()
		}
	}
}

// internMin is the shortest annotation value internAnnotations interns: shorter ones compare
// about as fast as their pointers.
const internMin = 64

// StateReader reads a pod's state as inplace.ReadState does, from a cache where it keeps one: a
// PodWatch decodes the state of each pod object it handed out once, however many steps read it.
// The states it returns are shared: read-only.
type StateReader interface {
	ReadState(pod *corev1.Pod) (*inplace.State, error)
}

// decodedState is the state ReadState read from one pod object: its annotation's text then, and
// what it decoded to.
type decodedState struct {
	raw   string
	state *inplace.State
	err   error
}

// ReadState is inplace.ReadState, once per pod object: the watch's pods are read-only and
// replaced, not changed, when the pod changes, so the state of a pod object already read is
// that of its last read while its annotation is the same text (compared at the pointer, as it
// is the same string). At 5,000 pods, decoding, checking and copying each pod's state at each
// step was half of a step's CPU. The entry of a pod object goes once nothing else holds it (a
// weak key with a cleanup), so the cache holds no pod the watch has let go of.
func (w *PodWatch) ReadState(pod *corev1.Pod) (*inplace.State, error) {
	raw := pod.Annotations[inplace.StateAnnotation]
	key := weak.Make(pod)
	w.statesMu.Lock()
	d, ok := w.states[key]
	w.statesMu.Unlock()
	if ok && d.raw == raw {
		return d.state, d.err
	}
	s, err := inplace.ReadState(pod)
	w.statesMu.Lock()
	defer w.statesMu.Unlock()
	if _, known := w.states[key]; !known {
		goruntime.AddCleanup(pod, w.forget, key)
	}
	w.states[key] = decodedState{raw: raw, state: s, err: err}
	return s, err
}

// forget drops the decoded state of a pod object no longer held anywhere.
func (w *PodWatch) forget(key weak.Pointer[corev1.Pod]) {
	w.statesMu.Lock()
	defer w.statesMu.Unlock()
	delete(w.states, key)
}

// narrows reports whether every pod sel selects is one of those of watched selects: sel has
// every requirement of watched.
func narrows(sel, watched labels.Selector) bool {
	have, ok := sel.Requirements()
	if !ok {
		return false
	}
	need, ok := watched.Requirements()
	if !ok {
		return false
	}
	for _, n := range need {
		found := false
		for _, h := range have {
			if h.Equal(n) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
