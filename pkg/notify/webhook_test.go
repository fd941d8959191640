package notify

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/internal/syncbuf"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// receiver is a local webhook: it answers each request with the next of its statuses (200 once
// they run out) and keeps what it was sent.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	requests []request
}

type request struct {
	contentType, authorization string
	body                       []byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, request{req.Header.Get("Content-Type"), req.Header.Get("Authorization"), body})
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	w.WriteHeader(status)
}

func (r *receiver) received() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

var succeeded = rollout.Notification{Kind: rollout.NotifySucceeded, RolloutID: "r-1",
	Target: workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}, Phase: rollout.PhaseSucceeded,
	Message: "3/3 pods updated in place", At: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}

// newWebhook is a Webhook to target whose log goes to logs, with retries a millisecond apart.
func newWebhook(t *testing.T, target, token string, logs *bytes.Buffer) *Webhook {
	t.Helper()
	w, err := NewWebhook(target, token, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.backoff = time.Millisecond
	return w
}

// TestWebhookPostsACloudEvent: a notification arrives as one CloudEvents JSON document, with
// the token as a bearer token.
func TestWebhookPostsACloudEvent(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	w := newWebhook(t, srv.URL+"/hook", "t0ken", &logs)
	w.Notify(succeeded)
	if err := w.Close(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := rcv.received()
	if len(got) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(got))
	}
	if got[0].contentType != "application/cloudevents+json" || got[0].authorization != "Bearer t0ken" {
		t.Errorf("Content-Type %q, Authorization %q; want application/cloudevents+json, Bearer t0ken", got[0].contentType, got[0].authorization)
	}
	var doc struct {
		SpecVersion, ID, Source, Type, Subject, Time string
		Data                                         Data
	}
	if err := json.Unmarshal(got[0].body, &doc); err != nil {
		t.Fatalf("the document: %v\n%s", err, got[0].body)
	}
	want := Data{RolloutID: "r-1", Target: Target{Kind: "StatefulSet", Namespace: "shop", Name: "web"}, Phase: rollout.PhaseSucceeded, Message: "3/3 pods updated in place"}
	if doc.SpecVersion != "1.0" || doc.ID != "r-1.succeeded" || doc.Source != "/apis/apps/v1/namespaces/shop/statefulsets/web" ||
		doc.Type != "io.inplace-rollout.rollout.succeeded" || doc.Subject != "r-1" || doc.Time != "2026-12-06T12:00:00Z" || doc.Data != want {
		t.Errorf("the document:\n%s\nwant specversion 1.0, id r-1.succeeded, the StatefulSet's path as source, type io.inplace-rollout.rollout.succeeded, and data %+v", got[0].body, want)
	}
	if !strings.Contains(logs.String(), "notification delivered") {
		t.Errorf("the log does not say the notification was delivered:\n%s", logs.String())
	}
}

// TestWebhookRetries: the receiver's trouble is retried until it answers; a refusal is not.
// Either way the outcome is logged.
func TestWebhookRetries(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		tries    int
		log      string
	}{
		{"unavailable twice, then delivered", []int{503, 503}, 3, "notification delivered"},
		{"too many requests, then delivered", []int{429}, 2, "notification delivered"},
		{"refused", []int{400}, 1, "notification not delivered"},
		{"failing every try", []int{500, 500, 500, 500, 500, 500, 500}, 6, "notification not delivered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rcv := &receiver{statuses: tt.statuses}
			srv := httptest.NewServer(rcv)
			t.Cleanup(srv.Close)
			var logs bytes.Buffer
			w := newWebhook(t, srv.URL, "", &logs)
			w.Notify(succeeded)
			if err := w.Close(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if got := rcv.received(); len(got) != tt.tries {
				t.Errorf("the receiver got %d tries, want %d", len(got), tt.tries)
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("the log does not say %q:\n%s", tt.log, logs.String())
			}
		})
	}
}

// TestWebhookKeepsItsSecrets: a webhook that cannot be reached is logged without its URL (whose
// path and query hold a secret) or its token; a bad URL is refused without quoting it.
func TestWebhookKeepsItsSecrets(t *testing.T) {
	srv := httptest.NewServer(&receiver{})
	target := srv.URL + "/hooks/s3cr3t-path?key=k3y"
	srv.Close() // nothing listens there now: every try fails, quoting the URL it went to
	var logs bytes.Buffer
	w := newWebhook(t, target, "t0ken", &logs)
	w.Notify(succeeded)
	if err := w.Close(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "notification not delivered") || !strings.Contains(logs.String(), "[webhook]") {
		t.Errorf("the log does not say the notification to [webhook] was not delivered:\n%s", logs.String())
	}
	for _, secret := range []string{"s3cr3t", "k3y", "t0ken"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log carries %q:\n%s", secret, logs.String())
		}
	}
	_, err := NewWebhook("ftp://user:pa55@example.invalid/s3cr3t", "", slog.New(slog.DiscardHandler))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "pa55") {
		t.Errorf("NewWebhook of an ftp URL: %v; want an error that does not quote the URL", err)
	}
}

// TestNotifyNeverBlocks: with the receiver hanging, Notify returns at once, beyond the queue's
// size too, and a full queue drops and logs.
func TestNotifyNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	var logs syncbuf.Buffer
	w, err := NewWebhook(srv.URL, "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.backoff = time.Millisecond
	t.Cleanup(func() {
		close(release)
		if err := w.Close(30 * time.Second); err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	for range queueSize + 2 {
		w.Notify(succeeded)
	}
	if !strings.Contains(logs.String(), "notification dropped") {
		t.Errorf("a full queue did not drop and log:\n%s", logs.String())
	}
}
