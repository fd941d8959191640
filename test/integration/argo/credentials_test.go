package argo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// promProxy is a Prometheus in front of the test's real one, on loopback, that answers only
// requests bearing its own token and records the Authorization header of every request.
type promProxy struct {
	*httptest.Server
	token string

	mu   sync.Mutex
	seen []string
}

func newPromProxy(t *testing.T, token string) *promProxy {
	t.Helper()
	target, err := url.Parse(env.PrometheusURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	p := &promProxy{token: token}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		p.mu.Lock()
		p.seen = append(p.seen, auth)
		p.mu.Unlock()
		if auth != "Bearer "+token {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// headers returns the Authorization headers seen, each with its count.
func (p *promProxy) headers() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, h := range p.seen {
		out[h]++
	}
	return out
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "token-" + hex.EncodeToString(b)
}

// TestStepTwoRolloutsOwnPrometheusCredentials: two Rollouts drive two StatefulSets at once
// through the one step plugin process, each analysing its batches through its own Prometheus
// address with its own bearer token, from a Secret of its own namespace. Both succeed; each
// Prometheus only ever saw its own token; neither token shows in the Rollouts, the namespaces'
// Events, the StatefulSets and pods, or the controller's log (plugin stderr included).
func TestStepTwoRolloutsOwnPrometheusCredentials(t *testing.T) {
	t.Parallel()
	began := time.Now()
	type side struct {
		ns, token string
		proxy     *promProxy
		steps     stepsFunc
		old       string
	}
	sides := []*side{{}, {}}
	for _, s := range sides {
		s.ns = env.Namespace(t)
		s.token = randomToken(t)
		s.proxy = newPromProxy(t, s.token)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reader", Namespace: s.ns}, StringData: map[string]string{"token": s.token}}
		if _, err := env.Client.CoreV1().Secrets(s.ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Secret %s/prometheus-reader: %v", s.ns, err)
		}
		clitest.CreateStatefulSet(t, env, s.ns, "web", replicas)
		s.steps = oneStep("web", map[string]any{"analysis": map[string]any{
			"prometheus": map[string]any{
				"address":           s.proxy.URL,
				"bearerTokenSecret": map[string]any{"name": "prometheus-reader", "key": "token"},
			},
			"interval": "1s",
			"count":    1,
			"window":   "5s",
		}})
		createRollout(t, s.ns, "web", clitest.AppV1, s.steps)
	}
	for _, s := range sides {
		waitTraffic(t, s.ns)
	}
	for _, s := range sides {
		s.old = setImage(t, s.ns, "web", clitest.AppV2, s.steps)
	}
	var rollouts []*rolloutsv1alpha1.Rollout
	for _, s := range sides {
		rollouts = append(rollouts, waitRollout(t, s.ns, "web", 4*time.Minute, "Healthy on the new revision", func(ro *rolloutsv1alpha1.Rollout) bool {
			return onNewRevision(ro, s.old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
		}))
		if n, _ := podsOn(t, s.ns, "web", clitest.AppV2); n != replicas {
			t.Errorf("%s: %d of %d pods on %s", s.ns, n, replicas, clitest.AppV2)
		}
	}

	for i, s := range sides {
		seen := s.proxy.headers()
		if seen["Bearer "+s.token] == 0 {
			t.Errorf("Prometheus %d (%s) was never queried with its token", i, s.ns)
		}
		for h, n := range seen {
			if h != "Bearer "+s.token {
				t.Errorf("Prometheus %d (%s) saw %d requests with another Authorization header (empty, or the other Rollout's token: %v)",
					i, s.ns, n, h == "Bearer "+sides[1-i].token)
			}
		}
		t.Logf("Prometheus %d (%s): %d queries, all with its own token", i, s.ns, seen["Bearer "+s.token])
	}

	// Nowhere a token may leak: what the test can read of what Argo and the plugin wrote.
	places := map[string]string{"the controller log": argoLog(t, 0)}
	for i, s := range sides {
		ro, err := json.Marshal(rollouts[i])
		if err != nil {
			t.Fatal(err)
		}
		places["Rollout "+s.ns+"/web"] = string(ro)
		events, err := env.Client.CoreV1().Events(s.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ev, _ := json.Marshal(events.Items)
		places["the Events of "+s.ns] = string(ev)
		sts, err := env.Client.AppsV1().StatefulSets(s.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := json.Marshal(sts)
		places["StatefulSet "+s.ns+"/web"] = string(st)
		pods, _ := json.Marshal(clitest.ListPods(t, env, s.ns, "app=web"))
		places["the pods of "+s.ns] = string(pods)
	}
	for where, text := range places {
		for i, s := range sides {
			if strings.Contains(text, s.token) {
				t.Errorf("the token of Rollout %d (%s) shows in %s", i, s.ns, where)
			}
		}
	}
	t.Logf("two Rollouts with their own Prometheus credentials in %s", time.Since(began).Round(100*time.Millisecond))
}

// TestStepRefusesInlinePrometheusPassword: a step whose analysis carries a Prometheus password
// written in the Rollout, which everyone who may read Rollouts reads, fails naming
// passwordSecret, and Argo aborts the Rollout; nothing is written to the target, and the password
// shows in nothing the plugin or Argo wrote.
func TestStepRefusesInlinePrometheusPassword(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	password := randomToken(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 2)
	before := podStates(t, ns, "web")
	steps := oneStep("web", map[string]any{"analysis": map[string]any{
		"prometheus": map[string]any{
			"address":   env.PrometheusURL,
			"basicAuth": map[string]any{"username": "reader", "password": password},
		},
		"interval": "1s",
		"count":    1,
		"window":   "5s",
	}})
	logFrom := argoLogSize(t)
	createRollout(t, ns, "web", clitest.AppV1, steps)
	old := setImage(t, ns, "web", clitest.AppV2, steps)
	ro := settledOn(t, ns, "web", old)

	if ro.Status.Phase != rolloutsv1alpha1.RolloutPhaseDegraded || !ro.Status.Abort {
		t.Errorf("the Rollout is %s (abort %v), want Degraded and aborted: %s", ro.Status.Phase, ro.Status.Abort, describeRollout(ro))
	}
	run := lastRun(ro)
	if run == nil || run.Phase != rolloutsv1alpha1.StepPluginPhaseFailed {
		t.Fatalf("the step's last Run is not Failed: %s", describeRollout(ro))
	}
	for _, want := range []string{"Rollout " + ns + "/web", "analysis.prometheus.basicAuth.password", "analysis.prometheus.basicAuth.passwordSecret"} {
		if !strings.Contains(run.Message, want) {
			t.Errorf("the step's message %q does not say %q", run.Message, want)
		}
	}
	if after := podStates(t, ns, "web"); !maps.Equal(before, after) {
		t.Errorf("pods changed: before %v, after %v", before, after)
	}
	if n := specImages(t, ns, "web", clitest.AppV2); n != 0 {
		t.Errorf("%d pods' specs on %s", n, clitest.AppV2)
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lock := sts.Annotations[workload.LockAnnotation]; lock != "" {
		t.Errorf("StatefulSet %s/web carries the lock %s: the refused step wrote to it", ns, lock)
	}

	// The password is in the Rollout's spec, where its author put it; nowhere else.
	status, _ := json.Marshal(ro.Status)
	events, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := json.Marshal(events.Items)
	st, _ := json.Marshal(sts)
	pods, _ := json.Marshal(clitest.ListPods(t, env, ns, "app=web"))
	for where, text := range map[string]string{"the Rollout's status": string(status), "the Events of " + ns: string(ev),
		"the controller log": argoLog(t, logFrom), "the StatefulSet": string(st), "the pods": string(pods)} {
		if strings.Contains(text, password) {
			t.Errorf("the password shows in %s", where)
		}
	}
}
