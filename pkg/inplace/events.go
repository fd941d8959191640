package inplace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// EventRecorder records Events about a pod or a workload, the object regarding refers to.
type EventRecorder interface {
	Record(ctx context.Context, regarding corev1.ObjectReference, ev Event) error
}

// PodRef is what an Event about pod regards: the pod as written (its resourceVersion).
func PodRef(pod *corev1.Pod) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion}
}

// EventBroadcaster records the Events of one process through client-go's events library
// (events.k8s.io/v1), in the background, so that pod writes never wait for them: an Event the
// same as one just recorded (same pod, same resourceVersion, same reason) is folded into it as a
// series instead of being written again. The API server serves the same objects as core/v1
// Events, which `kubectl describe pod` lists. Make one per process, a Recorder per component,
// and Close it before the process exits.
type EventBroadcaster struct {
	b      events.EventBroadcaster
	cancel context.CancelFunc
	onErr  func(error)

	mu      sync.Mutex
	closed  bool
	pending map[eventKey]*eventCount
	// written is closed, and replaced, after every write: Flush waits on it.
	written chan struct{}
}

// eventKey is what the library folds Events by (getKey in k8s.io/client-go/tools/events),
// less what one broadcaster's Events all share (the reporting instance).
type eventKey struct {
	typ, action, reason, controller string
	regarding, related              corev1.ObjectReference
}

// eventCount is what happened to the Events of one key.
type eventCount struct {
	recorded, written int
	last              time.Time
}

// writesDue is how many writes the library makes for the Events of c: the first is created,
// the second turns it into a series (a patch), and later ones only count in its memory.
func (c *eventCount) writesDue() int { return min(c.recorded, 2) }

const (
	// maxNoteBytes is the longest note the API server takes in an events.k8s.io/v1 Event.
	maxNoteBytes = 1024
	// keepCounts is how long the count of a key all of whose writes are done is kept: longer
	// than the library keeps an Event to fold the next into it (6 minutes, looked at every 6
	// minutes), so that a repeat within that time is not expected to write again.
	keepCounts = 15 * time.Minute
)

// NewEventBroadcaster starts recording Events through client. onErr gets each Event write that
// failed; nil drops them. The library's own log is discarded: onErr says the same.
func NewEventBroadcaster(client kubernetes.Interface, onErr func(error)) (*EventBroadcaster, error) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	b := &EventBroadcaster{cancel: cancel, onErr: onErr, pending: map[eventKey]*eventCount{}, written: make(chan struct{})}
	b.b = events.NewBroadcaster(&countingSink{next: &events.EventSinkImpl{Interface: client.EventsV1()}, b: b})
	if err := b.b.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the Event broadcaster: %w", err)
	}
	go b.forgetEvery(ctx, keepCounts)
	return b, nil
}

// Recorder records Events of component (ReportingController inplace-rollout.io/COMPONENT).
func (b *EventBroadcaster) Recorder(component string) EventRecorder {
	controller := "inplace-rollout.io/" + component
	return &recorder{b: b, controller: controller, r: b.b.NewRecorder(scheme.Scheme, controller).WithLogger(logr.Discard())}
}

type recorder struct {
	b          *EventBroadcaster
	controller string
	r          events.EventRecorderLogger
}

// Record queues one Event on the object regarding refers to. After Close it records nothing and
// says so.
func (p *recorder) Record(_ context.Context, regarding corev1.ObjectReference, ev Event) error {
	ref := &regarding
	act := action(ev.Reason)
	key := eventKey{typ: ev.Type, action: act, reason: ev.Reason, controller: p.controller, regarding: *ref}
	if ev.Related != nil {
		key.related = *ev.Related
	}
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("recording event %s on %s %s/%s: the recorder is closed", ev.Reason, ref.Kind, ref.Namespace, ref.Name)
	}
	c := b.pending[key]
	if c == nil {
		c = &eventCount{}
		b.pending[key] = c
	}
	c.recorded++
	c.last = time.Now()
	// "%s": a message is never a format.
	var related runtime.Object
	if ev.Related != nil {
		related = ev.Related
	}
	p.r.Eventf(ref, related, ev.Type, ev.Reason, act, "%s", truncateNote(ev.Message))
	return nil
}

// action is an Event's action (required in events.k8s.io/v1): what the rollout was doing.
func action(reason string) string {
	switch reason {
	case EventRollingBack, EventRolledBack, EventRollbackFailed:
		return "RollBack"
	}
	return "Update"
}

// truncateNote cuts msg to what the API server takes, on a character boundary: a longer note
// would have the whole Event refused.
func truncateNote(msg string) string {
	if len(msg) <= maxNoteBytes {
		return msg
	}
	const more = "..."
	cut := maxNoteBytes - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// Flush waits until every Event recorded so far was written or failed for good (the library
// tries again after an error of the connection: those it waits for), and returns after timeout
// at the latest, saying how many were left.
func (b *EventBroadcaster) Flush(timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		left, written := b.left(), b.written
		b.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-written:
		case <-deadline.C:
			return fmt.Errorf("%d events not recorded within %s", left, timeout)
		}
	}
}

// Close records the Events queued (see Flush), then stops the broadcaster: Shutdown alone
// hands the Events queued to the library's writer but does not wait for their writes, which a
// process that exits next would cut off. Record fails after Close; Close again does nothing.
func (b *EventBroadcaster) Close(timeout time.Duration) error {
	b.mu.Lock()
	closed := b.closed
	b.closed = true
	b.mu.Unlock()
	if closed {
		return nil
	}
	err := b.Flush(timeout)
	b.b.Shutdown()
	b.cancel()
	return err
}

// left counts the writes still due. Callers hold b.mu.
func (b *EventBroadcaster) left() int {
	n := 0
	for _, c := range b.pending {
		n += max(c.writesDue()-c.written, 0)
	}
	return n
}

// wrote counts one write of ev done, and wakes Flush.
func (b *EventBroadcaster) wrote(ev *eventsv1.Event) {
	key := eventKey{typ: ev.Type, action: ev.Action, reason: ev.Reason, controller: ev.ReportingController, regarding: ev.Regarding}
	if ev.Related != nil {
		key.related = *ev.Related
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.pending[key]
	if c == nil {
		// A series the library writes again on its own (its count, every 30 minutes).
		c = &eventCount{}
		b.pending[key] = c
	}
	c.written++
	c.last = time.Now()
	close(b.written)
	b.written = make(chan struct{})
}

// forgetEvery forgets what is older than every, every so often, until ctx ends: a process
// that runs for days records Events on ever new pod versions.
func (b *EventBroadcaster) forgetEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.forget(now.Add(-every))
		}
	}
}

// forget drops the counts of keys all of whose writes are done, last seen before before.
func (b *EventBroadcaster) forget(before time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, c := range b.pending {
		if c.written >= c.writesDue() && c.last.Before(before) {
			delete(b.pending, k)
		}
	}
}

// countingSink writes through next and tells b of every write done: written, or failed for
// good. It tells apart the failures the library tries again (recordEvent in
// k8s.io/client-go/tools/events): those are not done yet, and not worth a report either.
type countingSink struct {
	next events.EventSink
	b    *EventBroadcaster
}

func (s *countingSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	out, err := s.next.Create(ctx, ev)
	s.done(ev, err)
	return out, err
}

func (s *countingSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	out, err := s.next.Update(ctx, ev)
	s.done(ev, err)
	return out, err
}

func (s *countingSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	out, err := s.next.Patch(ctx, ev, data)
	if apierrors.IsNotFound(err) {
		// The library creates the Event instead: that write is the one that counts.
		return out, err
	}
	s.done(ev, err)
	return out, err
}

func (s *countingSink) done(ev *eventsv1.Event, err error) {
	if retried(ev, err) {
		return
	}
	if err != nil && s.b.onErr != nil {
		s.b.onErr(fmt.Errorf("recording event %s on pod %s/%s: %w", ev.Reason, ev.Regarding.Namespace, ev.Regarding.Name, err))
	}
	s.b.wrote(ev)
}

// retried reports whether the library writes ev again after err: after an error of the
// connection (no API status), or when the series it creates was created meanwhile (it patches
// it then).
func retried(ev *eventsv1.Event, err error) bool {
	var status *apierrors.StatusError
	var construction *rest.RequestConstructionError
	switch {
	case err == nil, errors.As(err, &construction):
		return false
	case errors.As(err, &status):
		return apierrors.IsAlreadyExists(err) && ev.Series != nil
	}
	return true
}

// NewEvent is the Event ev of component about the object ref, named name in ref's namespace,
// seen once at now, written as a core/v1 Event: a driver that names its Events itself, to
// record one once across processes, writes this shape.
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
