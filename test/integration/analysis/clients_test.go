package analysis_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// tokenGate is a Prometheus in front of the test's real one that answers only requests
// bearing its own token, and counts both kinds.
type tokenGate struct {
	*httptest.Server
	token        string
	right, wrong atomic.Int64
}

func newTokenGate(t *testing.T, token string) *tokenGate {
	t.Helper()
	target, err := url.Parse(env.PrometheusURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	g := &tokenGate{token: token}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			g.wrong.Add(1)
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		g.right.Add(1)
		r.SetBasicAuth(promUser, promPassword)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// TestOneEngineQueriesEachRolloutsOwnPrometheus reconciles two rollouts at once through one
// Engine, as the Argo plugin process does, each analysed through its own Prometheus address
// with its own token from a Secret of its namespace: no query goes to the other's address or
// with the other's token.
func TestOneEngineQueriesEachRolloutsOwnPrometheus(t *testing.T) {
	engine := &rollout.Engine{Client: env.Client}
	type run struct {
		ns    string
		gate  *tokenGate
		final rollout.Status
		err   error
	}
	runs := []*run{{}, {}}
	for i, r := range runs {
		r.ns = newWeb(t)
		token := []string{"token-of-rollout-a", "token-of-rollout-b"}[i]
		r.gate = newTokenGate(t, token)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reader", Namespace: r.ns}, StringData: map[string]string{"token": token}}
		if _, err := env.Client.CoreV1().Secrets(r.ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		cfg, err := analysis.Decode([]byte("prometheus:\n  address: " + r.gate.URL + "\n  bearerTokenSecret: {name: prometheus-reader, key: token}\ninterval: 1s\ncount: 1\nwindow: 5s\n"))
		if err != nil {
			t.Fatal(err)
		}
		spec := rollout.Spec{
			Target:  workload.Ref{Kind: workload.StatefulSet, Namespace: r.ns, Name: "web"},
			Images:  map[string]string{"app": clitest.AppV2},
			Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")},
			Holder:  "test", Analysis: cfg, MaxUnavailable: intstr.FromInt32(2), Timeout: 5 * time.Minute,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			for ctx.Err() == nil {
				st, requeue, err := engine.Reconcile(ctx, spec, r.final)
				if err != nil {
					r.err = err
					return
				}
				r.final = st
				if st.Phase.Terminal() || st.Phase == rollout.PhasePaused {
					return
				}
				time.Sleep(max(requeue, 50*time.Millisecond))
			}
			r.err = ctx.Err()
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if r.err != nil || r.final.Phase != rollout.PhaseSucceeded {
			t.Errorf("%s: %s (%s), error %v; want Succeeded", r.ns, r.final.Phase, r.final.Message, r.err)
		}
		if r.gate.right.Load() == 0 || r.gate.wrong.Load() != 0 {
			t.Errorf("%s: its Prometheus answered %d queries with its token and refused %d; want some and none",
				r.ns, r.gate.right.Load(), r.gate.wrong.Load())
		}
		noSecret(t, r.ns, r.final.Message)
	}
}
