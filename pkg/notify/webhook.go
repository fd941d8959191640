// Package notify sends a rollout's outcomes (rollout.Notification) out of the cluster: as
// CloudEvents JSON documents posted to a webhook, with the CloudEvents SDK.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cecontext "github.com/cloudevents/sdk-go/v2/context"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.uber.org/zap"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// EventTypePrefix begins the CloudEvents type of each notification: the kind follows, as in
// io.inplace-rollout.rollout.succeeded.
const EventTypePrefix = "io.inplace-rollout.rollout."

// Delivery of one notification: a try, then retries after backoff doubling from firstBackoff,
// each try bounded by tryTimeout.
const (
	retries      = 5
	firstBackoff = 500 * time.Millisecond
	tryTimeout   = 10 * time.Second
	// queueSize bounds the notifications waiting to be sent; beyond it one is dropped, and the
	// log says so: a rollout never waits for its webhook.
	queueSize = 100
)

// Data is the data of a notification's CloudEvent.
type Data struct {
	RolloutID string         `json:"rolloutID"`
	Target    Target         `json:"target"`
	Phase     rollout.Phase  `json:"phase"`
	Reason    rollout.Reason `json:"reason,omitempty"`
	Message   string         `json:"message"`
}

// Target is the workload a notification is about.
type Target struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name,omitempty"`
	Selector  string `json:"selector,omitempty"`
}

// Webhook posts each notification to a URL as a CloudEvents JSON document (structured mode),
// in the background: Notify queues it and returns. A delivery that fails (no answer, or a
// status worth a retry: 408, 429, 5xx) is retried with backoff, then logged and dropped. Neither
// the URL, which may carry a secret (as a chat webhook's path does), nor the token is ever
// logged or put in an error.
type Webhook struct {
	client cloudevents.Client
	log    *slog.Logger
	// secrets are the strings a delivery error's text must not carry.
	secrets []string
	queue   chan rollout.Notification
	done    chan struct{}
	once    sync.Once
	// backoff is firstBackoff; tests shorten it.
	backoff time.Duration
}

// NewWebhook makes a Webhook that posts to target, with "Authorization: Bearer token" when
// token is not empty, and starts its sender. Close stops it.
func NewWebhook(target, token string, log *slog.Logger) (*Webhook, error) {
	u, err := parseURL(target)
	if err != nil {
		return nil, err
	}
	opts := []cehttp.Option{cehttp.WithTarget(target), cehttp.WithIsRetriableFunc(retriable)}
	if token != "" {
		opts = append(opts, cehttp.WithHeader("Authorization", "Bearer "+token))
	}
	secrets := secretsOf(target, u, token)
	p, err := cloudevents.NewHTTP(opts...)
	if err != nil {
		return nil, fmt.Errorf("setting up the webhook: %w", redact(err, secrets...))
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		return nil, fmt.Errorf("setting up the webhook: %w", redact(err, secrets...))
	}
	w := &Webhook{client: c, log: log, secrets: secrets, queue: make(chan rollout.Notification, queueSize),
		done: make(chan struct{}), backoff: firstBackoff}
	go w.send()
	return w, nil
}

// CheckURL refuses a webhook URL that is not an absolute http or https URL, without quoting it:
// it may carry a secret.
func CheckURL(target string) error {
	_, err := parseURL(target)
	return err
}

func parseURL(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("the webhook URL is not an absolute http or https URL")
	}
	return u, nil
}

// retriable says which answers are worth another try: a timeout, too many requests, or the
// receiver's trouble.
func retriable(status int) bool {
	return status == 408 || status == 429 || status >= 500
}

// Notify queues n to be sent. It never blocks: with the queue full, n is dropped and logged.
func (w *Webhook) Notify(n rollout.Notification) {
	select {
	case w.queue <- n:
	default:
		w.log.Warn("notification dropped: too many waiting to be sent", logAttrs(n)...)
	}
}

// Close sends what is queued, for at most timeout, then stops. Notify must not be called after.
func (w *Webhook) Close(timeout time.Duration) error {
	w.once.Do(func() { close(w.queue) })
	select {
	case <-w.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("notifications still unsent after %s", timeout)
	}
}

func (w *Webhook) send() {
	defer close(w.done)
	for n := range w.queue {
		w.deliver(n)
	}
}

// deliver posts n, with the retries, and logs the outcome.
func (w *Webhook) deliver(n rollout.Notification) {
	ev := Event(n)
	// The SDK logs through zap, to stderr unless told otherwise: it logs nothing here, so that
	// what it would say of the URL stays unsaid; the outcome is logged below.
	ctx := cecontext.WithLogger(context.Background(), zap.NewNop().Sugar())
	ctx = cloudevents.WithEncodingStructured(ctx)
	ctx = cloudevents.ContextWithRetriesExponentialBackoff(ctx, w.backoff, retries)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(retries+1)*tryTimeout)
	defer cancel()
	if res := w.client.Send(ctx, ev); !cloudevents.IsACK(res) {
		w.log.Warn("notification not delivered", append(logAttrs(n), "err", redact(res, w.secrets...).Error())...)
		return
	}
	w.log.Info("notification delivered", logAttrs(n)...)
}

// Event is n as a CloudEvent. Its ID is the rollout's and the kind's, the same for every
// delivery of the same outcome, so a receiver can drop a duplicate.
func Event(n rollout.Notification) cloudevents.Event {
	ev := cloudevents.NewEvent()
	ev.SetID(n.RolloutID + "." + string(n.Kind))
	ev.SetSource(source(n))
	ev.SetType(EventTypePrefix + string(n.Kind))
	ev.SetSubject(n.RolloutID)
	ev.SetTime(n.At)
	target := Target{Kind: string(n.Target.Kind), Namespace: n.Target.Namespace, Name: n.Target.Name, Selector: n.Target.Selector}
	// A struct of strings always encodes.
	_ = ev.SetData(cloudevents.ApplicationJSON, Data{RolloutID: n.RolloutID, Target: target, Phase: n.Phase, Reason: n.Reason, Message: n.Message})
	return ev
}

// source is the API path of the workload a notification is about, the context its event
// happened in; label-selected pods are their list's path with the selector.
func source(n rollout.Notification) string {
	t := n.Target
	if t.Name == "" {
		return fmt.Sprintf("/api/v1/namespaces/%s/pods?labelSelector=%s", t.Namespace, url.QueryEscape(t.Selector))
	}
	return fmt.Sprintf("/apis/apps/v1/namespaces/%s/%ss/%s", t.Namespace, strings.ToLower(string(t.Kind)), t.Name)
}

func logAttrs(n rollout.Notification) []any {
	return []any{"kind", string(n.Kind), "target", n.Target.String(), "rolloutID", n.RolloutID}
}

// secretsOf are the strings of a webhook's URL and token that no log line may carry: the URL
// whole, as given and as the HTTP client prints it, the parts of it that may hold a secret (the
// user, the path, the query), and the token.
func secretsOf(target string, u *url.URL, token string) []string {
	s := []string{target, u.String(), u.RawQuery, token}
	if u.User != nil {
		s = append(s, u.User.String())
	}
	if p := u.EscapedPath(); len(p) > 1 {
		s = append(s, p)
	}
	return s
}

// redact is err with each secret replaced: the HTTP client's errors quote the URL they went to.
func redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[webhook]")
		}
	}
	return errors.New(msg)
}
