package keyqueue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestNext: what one worker does with a key, by what the cache and the step say.
func TestNext(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "things"}, "a", errors.New("changed"))
	tests := []struct {
		name      string
		getErr    error
		gone      bool
		stepErr   error
		requeue   time.Duration
		wantSteps int
		// wantRetries is the key's rate-limited retries afterwards; wantLog a line logged.
		wantRetries int
		wantLog     string
		wantAgain   bool // the key comes back after requeue
	}{
		{name: "done", wantSteps: 1},
		{name: "requeue asked for", requeue: time.Millisecond, wantSteps: 1, wantAgain: true},
		{name: "gone from the cache", gone: true},
		{name: "cache error", getErr: errors.New("broken"), wantRetries: 1},
		{name: "step failed", stepErr: errors.New("etcd is starting"), wantSteps: 1, wantRetries: 1, wantLog: `level=WARN msg="step failed, retrying" thing=ns/a error="etcd is starting"`},
		{name: "conflict", stepErr: conflict, wantSteps: 1, wantRetries: 1, wantLog: `level=INFO msg="object changed during the step, deciding again" thing=ns/a`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			steps := 0
			l := &Loop[string]{
				Queue: NewQueue("things"),
				Get: func(key string) (string, bool, error) {
					return key, !tt.gone, tt.getErr
				},
				Reconcile: func(_ context.Context, key string) (time.Duration, error) {
					steps++
					return tt.requeue, tt.stepErr
				},
				LogKey: "thing",
				Log:    slog.New(slog.NewTextHandler(&logs, nil)),
			}
			t.Cleanup(l.Queue.ShutDown)
			l.Enqueue(&metav1.ObjectMeta{Namespace: "ns", Name: "a"})
			if !l.Next(t.Context()) {
				t.Fatal("Next = false with the queue running")
			}
			if steps != tt.wantSteps {
				t.Errorf("%d steps, want %d", steps, tt.wantSteps)
			}
			if got := l.Queue.NumRequeues("ns/a"); got != tt.wantRetries {
				t.Errorf("%d retries, want %d", got, tt.wantRetries)
			}
			if !strings.Contains(logs.String(), tt.wantLog) || tt.wantLog == "" && logs.Len() > 0 {
				t.Errorf("logged %q, want %q", logs.String(), tt.wantLog)
			}
			if tt.wantAgain {
				// Get blocks until the key is back.
				if key, _ := l.Queue.Get(); key != "ns/a" {
					t.Errorf("requeued %q, want ns/a", key)
				}
			}
		})
	}
}

// TestNoStepOnceStopping: a worker takes no step once its context ended, and stops.
func TestNoStepOnceStopping(t *testing.T) {
	steps := 0
	l := &Loop[string]{
		Queue:     NewQueue("things"),
		Get:       func(key string) (string, bool, error) { return key, true, nil },
		Reconcile: func(context.Context, string) (time.Duration, error) { steps++; return 0, nil },
		Log:       slog.New(slog.DiscardHandler),
	}
	t.Cleanup(l.Queue.ShutDown)
	l.Queue.Add("ns/a")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if l.Next(ctx) || steps != 0 {
		t.Errorf("Next after the context ended = true or %d steps; want false and none", steps)
	}
}

// TestRunStops: Run returns once its context ends, its queue shut down.
func TestRunStops(t *testing.T) {
	l := &Loop[string]{Queue: NewQueue("things"), Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, 2)
	}()
	cancel()
	<-done
	if !l.Queue.ShuttingDown() {
		t.Error("the queue goes on after Run returned")
	}
}
