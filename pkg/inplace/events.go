package inplace

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// EventRecorder records Events about pods.
type EventRecorder interface {
	Record(ctx context.Context, pod *corev1.Pod, ev Event) error
}

// ClientEventRecorder writes core/v1 Events through the API, synchronously, so a short-lived
// command loses none when it exits.
type ClientEventRecorder struct {
	Client kubernetes.Interface
	// Component is the event source [inplace-rollout].
	Component string
}

// Record creates one Event on the pod.
func (r ClientEventRecorder) Record(ctx context.Context, pod *corev1.Pod, ev Event) error {
	component := r.Component
	if component == "" {
		component = "inplace-rollout"
	}
	now := metav1.NewTime(time.Now())
	event := NewEvent(fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}, ev, component, now)
	if _, err := r.Client.CoreV1().Events(pod.Namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on pod %s/%s: %w", ev.Reason, pod.Namespace, pod.Name, err)
	}
	return nil
}

// NewEvent is the Event ev of component about the object ref, named name in ref's namespace,
// seen once at now: every Event this project writes, on a pod or on a driver's object, has this
// shape.
func NewEvent(name string, ref corev1.ObjectReference, ev Event, component string, now metav1.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: ref.Namespace},
		InvolvedObject:      ref,
		Reason:              ev.Reason,
		Message:             ev.Message,
		Type:                ev.Type,
		Source:              corev1.EventSource{Component: component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "inplace-rollout.io/" + component,
		ReportingInstance:   component,
	}
}

// AsyncEventRecorder records Events through another recorder in the background, so that pod
// writes never wait for them (give that recorder a client of its own, whose rate limit the pod
// writes do not share). Close waits for the Events queued, so that a short-lived command loses
// none when it exits normally.
type AsyncEventRecorder struct {
	next  EventRecorder
	onErr func(error)
	queue chan queuedEvent
	done  sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

type queuedEvent struct {
	pod *corev1.Pod
	ev  Event
}

// asyncEventTimeout bounds the recording of one Event in the background.
const asyncEventTimeout = 10 * time.Second

// NewAsyncEventRecorder starts workers that record through next the Events queued (up to
// queue of them; Record waits when the queue is full). onErr gets each Event that could not be
// recorded; nil drops them.
func NewAsyncEventRecorder(next EventRecorder, workers, queue int, onErr func(error)) *AsyncEventRecorder {
	a := &AsyncEventRecorder{next: next, onErr: onErr, queue: make(chan queuedEvent, queue)}
	for range max(workers, 1) {
		a.done.Add(1)
		go func() {
			defer a.done.Done()
			for q := range a.queue {
				ctx, cancel := context.WithTimeout(context.Background(), asyncEventTimeout)
				if err := a.next.Record(ctx, q.pod, q.ev); err != nil && a.onErr != nil {
					a.onErr(err)
				}
				cancel()
			}
		}()
	}
	return a
}

// Record queues one Event on the pod. After Close it records nothing and says so.
func (a *AsyncEventRecorder) Record(ctx context.Context, pod *corev1.Pod, ev Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("recording event %s on pod %s/%s: the recorder is closed", ev.Reason, pod.Namespace, pod.Name)
	}
	// Only what the Event names of the pod; the rest of it is not kept alive meanwhile.
	ref := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion}}
	select {
	case a.queue <- queuedEvent{pod: ref, ev: ev}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("recording event %s on pod %s/%s: %w", ev.Reason, pod.Namespace, pod.Name, ctx.Err())
	}
}

// Close records the Events queued and returns when all are, or after timeout, saying how
// many were left.
func (a *AsyncEventRecorder) Close(timeout time.Duration) error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	finished := make(chan struct{})
	go func() { a.done.Wait(); close(finished) }()
	select {
	case <-finished:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%d events not recorded within %s", len(a.queue), timeout)
	}
}
