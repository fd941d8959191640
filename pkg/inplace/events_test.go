package inplace

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// flushWithin bounds every wait for writes the fake client makes at once.
const flushWithin = 10 * time.Second

// newEventBroadcaster is a broadcaster on client, closed when the test ends without waiting
// for writes: a test that needs them waits itself.
func newEventBroadcaster(t *testing.T, client *fake.Clientset, onErr func(error)) *EventBroadcaster {
	t.Helper()
	b, err := NewEventBroadcaster(client, onErr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(0) })
	return b
}

// eventPod is pod ns/p at resourceVersion rv.
func eventPod(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "p-uid", ResourceVersion: rv}}
}

func storedEvents(t *testing.T, client *fake.Clientset) []eventsv1.Event {
	t.Helper()
	list, err := client.EventsV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestEventRecorderWritesEachEvent: each Event recorded on a pod version is written as an
// events.k8s.io/v1 Event with the reason, type and message given, naming the pod version and
// the component, and an action saying which way the pod goes.
func TestEventRecorderWritesEachEvent(t *testing.T) {
	tests := []struct {
		name       string
		rv         string
		ev         Event
		wantAction string
	}{
		{"update", "5", Event{Type: corev1.EventTypeNormal, Reason: EventUpdating, Message: "updating in place: app reg/app:v1 -> reg/app:v2"}, "Update"},
		{"failure", "6", Event{Type: corev1.EventTypeWarning, Reason: EventUpdateFailed, Message: "ImagePullBackOff: 100% sure"}, "Update"},
		{"rollback", "7", Event{Type: corev1.EventTypeNormal, Reason: EventRolledBack, Message: "rolled back in place: app reg/app:v2 -> reg/app:v1"}, "RollBack"},
	}
	client := fake.NewClientset()
	b := newEventBroadcaster(t, client, func(err error) { t.Errorf("unexpected failure: %v", err) })
	r := b.Recorder("test")
	for _, tt := range tests {
		if err := r.Record(context.Background(), PodRef(eventPod(tt.rv)), tt.ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(flushWithin); err != nil {
		t.Fatal(err)
	}
	byRV := map[string]eventsv1.Event{}
	for _, e := range storedEvents(t, client) {
		byRV[e.Regarding.ResourceVersion] = e
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := byRV[tt.rv]
			if !ok {
				t.Fatalf("no Event on pod version %s; stored: %+v", tt.rv, byRV)
			}
			want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "p", UID: "p-uid", ResourceVersion: tt.rv}
			if e.Regarding != want || e.Namespace != "ns" || !strings.HasPrefix(e.Name, "p.") {
				t.Errorf("Event %s/%s regarding %+v, want ns/p.* regarding %+v", e.Namespace, e.Name, e.Regarding, want)
			}
			if e.Type != tt.ev.Type || e.Reason != tt.ev.Reason || e.Note != tt.ev.Message || e.Action != tt.wantAction {
				t.Errorf("Event %s %s %q action %s, want %s %s %q action %s", e.Type, e.Reason, e.Note, e.Action, tt.ev.Type, tt.ev.Reason, tt.ev.Message, tt.wantAction)
			}
			if e.ReportingController != "inplace-rollout.io/test" || !strings.HasPrefix(e.ReportingInstance, "inplace-rollout.io/test-") || e.EventTime.IsZero() {
				t.Errorf("Event reported by %q (%q) at %v, want inplace-rollout.io/test, an instance of it, and a time", e.ReportingController, e.ReportingInstance, e.EventTime)
			}
		})
	}
}

// TestEventRecorderFoldsRepeats: the same Event on the same pod version, recorded again, is
// not written again: the first becomes a series, and Flush knows which writes are still due.
//
// The library also writes each series it holds once as it starts and every 30 minutes after
// (refreshExistingEventSeries); its start-up run is a goroutine that may run after the series
// began, on a loaded machine, and write it once more. So the Event is recorded ten times: each
// repeat written would be nine patches, folded they are one, and two at most with that refresh.
func TestEventRecorderFoldsRepeats(t *testing.T) {
	const records = 10
	client := fake.NewClientset()
	b := newEventBroadcaster(t, client, nil)
	r := b.Recorder("test")
	ev := Event{Type: corev1.EventTypeWarning, Reason: "TagContentDiffers", Message: "pods of StatefulSet ns/web run one target tag as different content"}
	for i := range records {
		if err := r.Record(context.Background(), PodRef(eventPod("5")), ev); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(flushWithin); err != nil {
			t.Fatalf("after recording %d: %v", i+1, err)
		}
	}
	stored := storedEvents(t, client)
	if len(stored) != 1 {
		t.Fatalf("%d Events stored, want the first, as a series: %+v", len(stored), stored)
	}
	if s := stored[0].Series; s == nil || s.Count < 2 || s.Count > records || stored[0].Note != ev.Message {
		t.Errorf("stored Event %q, series %+v; want %q with a series counting 2 to %d (the rest are counted at the series' next write)", stored[0].Note, s, ev.Message, records)
	}
	var creates, patches int
	for _, a := range client.Actions() {
		switch a.GetVerb() + " " + a.GetResource().Resource {
		case "create events":
			creates++
		case "patch events":
			patches++
		}
	}
	if creates != 1 || patches < 1 || patches > 2 {
		t.Errorf("%d creates and %d patches of Events for %d records, want 1 create and 1 patch (2 if the library's start-up refresh of series came after the series began)", creates, patches, records)
	}
}

// TestEventRecorderKeepsRelatedApart: the same Event about one object with two related objects
// is two Events, each naming its related object, not one series.
func TestEventRecorderKeepsRelatedApart(t *testing.T) {
	client := fake.NewClientset()
	b := newEventBroadcaster(t, client, nil)
	r := b.Recorder("test")
	workload := corev1.ObjectReference{Kind: "StatefulSet", APIVersion: "apps/v1", Namespace: "ns", Name: "web", UID: "sts-uid"}
	for _, pod := range []string{"web-1", "web-3"} {
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: pod}
		if err := r.Record(context.Background(), workload, Event{Type: corev1.EventTypeNormal, Reason: "InPlaceBatchUpdating", Message: "batch starting with " + pod, Related: related}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(flushWithin); err != nil {
		t.Fatal(err)
	}
	stored := storedEvents(t, client)
	var related []string
	for _, ev := range stored {
		if ev.Related != nil && ev.Regarding.Name == "web" {
			related = append(related, ev.Related.Name)
		}
	}
	slices.Sort(related)
	if len(stored) != 2 || !slices.Equal(related, []string{"web-1", "web-3"}) {
		t.Errorf("%d Events stored, related %v; want two, one per related pod", len(stored), related)
	}
}

// TestEventRecorderReportsFailures: a write the API server refuses is reported, naming the
// Event and the pod, and is not waited for; one that fails on the connection is tried again by
// the library, and waited for.
func TestEventRecorderReportsFailures(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantReport bool
	}{
		{"refused", apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "p.1", errors.New("no")), true},
		{"connection refused", errors.New("dial tcp 10.0.0.1:443: connect: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			var (
				mu      sync.Mutex
				reports []string
			)
			b := newEventBroadcaster(t, client, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, err.Error())
			})
			if err := b.Recorder("test").Record(context.Background(), PodRef(eventPod("5")), Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "updated in place"}); err != nil {
				t.Fatal(err)
			}
			if tt.wantReport {
				if err := b.Flush(flushWithin); err != nil {
					t.Fatalf("Flush waits for a write refused: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(reports) != 1 || !strings.Contains(reports[0], "recording event InPlaceUpdated on pod ns/p: ") || !strings.Contains(reports[0], "forbidden") {
					t.Errorf("reports %q, want one naming the Event, the pod and the refusal", reports)
				}
				return
			}
			// The library tries again after 10s: Flush waits for it, up to its deadline.
			err := b.Flush(100 * time.Millisecond)
			if err == nil || err.Error() != "1 events not recorded within 100ms" {
				t.Errorf("Flush = %v, want 1 event not recorded within 100ms", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reports) != 0 {
				t.Errorf("reports %q, want none while the library tries again", reports)
			}
		})
	}
}

// TestEventBroadcasterCloseWaitsForWrites: Close returns once the writes in flight are done,
// and the recorder refuses Events after it.
func TestEventBroadcasterCloseWaitsForWrites(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	b := newEventBroadcaster(t, client, nil)
	r := b.Recorder("test")
	if err := r.Record(context.Background(), PodRef(eventPod("5")), Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "updated in place"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(50 * time.Millisecond); err == nil {
		t.Fatal("Flush returned while the write was held")
	}
	close(release)
	if err := b.Close(flushWithin); err != nil {
		t.Fatal(err)
	}
	if n := len(storedEvents(t, client)); n != 1 {
		t.Errorf("%d Events stored after Close, want 1", n)
	}
	err := r.Record(context.Background(), PodRef(eventPod("6")), Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "updated in place"})
	if err == nil || !strings.Contains(err.Error(), "the recorder is closed") {
		t.Errorf("Record after Close = %v, want the recorder is closed", err)
	}
	if err := b.Close(flushWithin); err != nil {
		t.Errorf("Close again = %v, want nil", err)
	}
}

// TestEventBroadcasterForgets: the counts of keys whose writes are done are dropped once old;
// those still due are kept.
func TestEventBroadcasterForgets(t *testing.T) {
	client := fake.NewClientset()
	// The write of version 6 fails on the connection: the library tries it again in 10s.
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*eventsv1.Event).Regarding.ResourceVersion == "6" {
			return true, nil, errors.New("connection reset by peer")
		}
		return false, nil, nil
	})
	b := newEventBroadcaster(t, client, nil)
	r := b.Recorder("test")
	for _, rv := range []string{"5", "6"} {
		if err := r.Record(context.Background(), PodRef(eventPod(rv)), Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "updated in place"}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until only the write of version 6 is due.
	deadline := time.After(flushWithin)
	for {
		b.mu.Lock()
		left, written := b.left(), b.written
		b.mu.Unlock()
		if left == 1 {
			break
		}
		select {
		case <-written:
		case <-deadline:
			t.Fatalf("%d writes due, want 1", left)
		}
	}
	b.forget(time.Now().Add(time.Hour))
	b.mu.Lock()
	defer b.mu.Unlock()
	var kept []string
	for k := range b.pending {
		kept = append(kept, k.regarding.ResourceVersion)
	}
	if len(kept) != 1 || kept[0] != "6" {
		t.Errorf("counts kept for pod versions %v, want only 6, whose write is due", kept)
	}
}

func TestTruncateNote(t *testing.T) {
	long := strings.Repeat("é", 600) // 1,200 bytes
	tests := []struct {
		name, msg, want string
	}{
		{"short", "updated in place", "updated in place"},
		{"at the limit", strings.Repeat("a", maxNoteBytes), strings.Repeat("a", maxNoteBytes)},
		{"cut on a character", long, strings.Repeat("é", (maxNoteBytes-3)/2) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncateNote(tt.msg)
			if got != tt.want || len(got) > maxNoteBytes || !utf8.ValidString(got) {
				t.Errorf("truncateNote = %q (%d bytes), want %q", got, len(got), tt.want)
			}
		})
	}
}
