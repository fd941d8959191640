package inplace_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestEventsReadAsCoreV1: the Events recorded through events.k8s.io/v1 are the core/v1 Events
// `kubectl describe pod` and the tests list: found by the involved object's name and the reason,
// with the type, message and pod version recorded, and a repeat folded into the first as a
// series.
func TestEventsReadAsCoreV1(t *testing.T) {
	ns := env.Namespace(t)
	pod := newPod(t, ns, "p", false, "app")
	b, err := inplace.NewEventBroadcaster(env.Client, func(err error) { t.Errorf("event not recorded: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(0) })
	ev := inplace.Event{Type: corev1.EventTypeWarning, Reason: inplace.EventUpdateFailed, Message: "ImagePullBackOff: app: Back-off pulling image \"registry.example/app:v9\""}
	r := b.Recorder("inplace-rollout")
	for range 2 {
		if err := r.Record(context.Background(), inplace.PodRef(pod), ev); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	list, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=p,reason=" + inplace.EventUpdateFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d core/v1 Events on pod p with reason %s, want 1: %+v", len(list.Items), inplace.EventUpdateFailed, list.Items)
	}
	e := list.Items[0]
	want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "p", UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	if e.InvolvedObject != want {
		t.Errorf("involvedObject %+v, want %+v", e.InvolvedObject, want)
	}
	if e.Type != ev.Type || e.Message != ev.Message {
		t.Errorf("Event %s %q, want %s %q", e.Type, e.Message, ev.Type, ev.Message)
	}
	if e.ReportingController != "inplace-rollout.io/inplace-rollout" || e.Action != "Update" || e.EventTime.IsZero() {
		t.Errorf("reported by %q, action %q, at %v; want inplace-rollout.io/inplace-rollout, Update, and a time", e.ReportingController, e.Action, e.EventTime)
	}
	if e.Series == nil || e.Series.Count != 2 {
		t.Errorf("series %+v, want the repeat counted: 2", e.Series)
	}
}
