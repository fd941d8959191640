package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	steprpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	trafficrpc "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin"
	"github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
	"github.com/inplace-rollout/inplace-rollout/plugin/step"
	"github.com/inplace-rollout/inplace-rollout/plugin/traffic"
	"github.com/inplace-rollout/inplace-rollout/test/integration/benchstat"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The Argo plugin benchmarks' target and images.
const (
	argoPods   = 100
	argoTarget = "web"
	imageV1    = "registry.example/app:v1"
	imageV2    = "registry.example/app:v2"
	// Pod template hashes of the Rollout's revisions, as Argo names them.
	hashV1 = "6555f8f8c4"
	hashV2 = "559d799c77"
	// callEvery paces the calls: Argo's come every 16 s per Rollout (11 s requeue plus its 5 s
	// backoff) and several a second around a transition; the benchmark wants many samples.
	callEvery = 100 * time.Millisecond
	// phaseBound is how long one phase may take before the benchmark gives up: a bound on a
	// stuck rollout, not a measurement.
	phaseBound = 10 * time.Minute
)

// BenchmarkArgoStepRun times the step plugin's Run, called over go-plugin's net/rpc and gob as
// Argo's controller calls it, with the previous call's status, while the rollout of a 100-pod
// StatefulSet is under way; then counts the API requests of one Run once the rollout is done,
// in the same plugin process and in a new one (its drivers lost, as after a restart). Argo calls
// a finished step no more, so a Healthy Rollout's reconcile costs the step plugin nothing; the
// Run once done is what a repeated call would cost. The engine's client has the plugin process's
// rate limit (client-go's default), which paces the rollout: api-calls/pod is its cost.
func BenchmarkArgoStepRun(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		createTarget(b, ns)
		e, counter := pluginEngine(b)
		config := mustJSON(b, map[string]any{
			"target":         map[string]any{"kind": "StatefulSet", "name": argoTarget},
			"images":         map[string]any{"app": imageV2},
			"batches":        []any{"10%", "20%", "30%", "40%", "50%", "60%", "70%", "80%", "90%", "100%"},
			"maxUnavailable": "10%",
			"soak":           "1s",
		})
		ro := argoRollout(ns, hashV1, hashV2)
		ro.Spec.Strategy.Canary = &argov1alpha1.CanaryStrategy{Steps: []argov1alpha1.CanaryStep{
			{Plugin: &argov1alpha1.PluginStep{Name: step.Name, Config: config}}}}
		sp := serveStep(b, step.New(func() (step.Clients, error) { return step.Clients{Driver: &rollout.Driver{Engine: e}}, nil }, step.Options{}))
		b.StartTimer()

		// Argo's loop: Run with the status the last Run returned, until the step ends.
		var (
			durations []time.Duration
			status    json.RawMessage
			res       types.RpcStepResult
			retried   int
			start     = time.Now()
		)
		for {
			sc := &types.RpcStepContext{PluginName: step.Name, Config: config, Status: status}
			t0 := time.Now()
			r, rpcErr := sp.Run(ro, sc)
			durations = append(durations, time.Since(t0))
			if rpcErr.HasError() {
				// Argo retries an RpcError; it is not a verdict.
				retried++
				b.Logf("Run: RpcError %s", rpcErr.ErrorString)
			} else {
				res, status = r, r.Status
				if r.Phase != types.PhaseRunning {
					break
				}
			}
			if time.Since(start) > phaseBound {
				b.Fatalf("the step still runs after %s: %s", phaseBound, res.Message)
			}
			time.Sleep(callEvery)
		}
		wall := time.Since(start)
		b.StopTimer()
		rolloutCalls := counter.snapshot()
		if res.Phase != types.PhaseSuccessful {
			b.Fatalf("the step ended %s: %s", res.Phase, res.Message)
		}
		onTarget(b, ns, imageV2)
		if len(durations) < 10 {
			b.Fatalf("only %d Run calls while the rollout was under way: too few to measure", len(durations))
		}
		p50, p99 := benchstat.Percentile(durations, 50), benchstat.Percentile(durations, 99)

		// The rollout is done: what a Run with the step's last status costs, in this process
		// and in a new one.
		idle := counter.snapshot()
		r, rpcErr := sp.Run(ro, &types.RpcStepContext{PluginName: step.Name, Config: config, Status: status})
		if rpcErr.HasError() || r.Phase != types.PhaseSuccessful {
			b.Fatalf("Run after the rollout = %s (%s), RpcError %q; want Successful", r.Phase, r.Message, rpcErr.ErrorString)
		}
		idleCalls := since(idle, counter.snapshot())

		e2, counter2 := pluginEngine(b)
		sp2 := serveStep(b, step.New(func() (step.Clients, error) { return step.Clients{Driver: &rollout.Driver{Engine: e2}}, nil }, step.Options{}))
		restartRuns := 0
		for restartStart := time.Now(); ; restartRuns++ {
			r, rpcErr = sp2.Run(ro, &types.RpcStepContext{PluginName: step.Name, Config: config, Status: status})
			if !rpcErr.HasError() && r.Phase != types.PhaseRunning {
				break
			}
			if time.Since(restartStart) > phaseBound {
				b.Fatalf("a new plugin process still runs the finished step after %s: %s %s", phaseBound, r.Message, rpcErr.ErrorString)
			}
			time.Sleep(callEvery)
		}
		if r.Phase != types.PhaseSuccessful {
			b.Fatalf("Run in a new plugin process after the rollout = %s: %s; want Successful", r.Phase, r.Message)
		}
		restartCalls := counter2.snapshot()

		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		b.ReportMetric(float64(len(durations)), "run-calls")
		b.ReportMetric(float64(callCount(rolloutCalls))/argoPods, "api-calls/pod")
		b.ReportMetric(float64(callCount(idleCalls)), "api-calls/reconcile")
		b.ReportMetric(float64(callCount(restartCalls)), "api-calls/new-process")
		b.Logf("step Run on %d pods: %d calls over %s of rollout (%d RpcErrors): p50 %s, p99 %s, max %s; the rollout's API calls: %d %s; API calls of a Run once done: %d %s; in a new plugin process: %d %s over %d Runs",
			argoPods, len(durations), wall.Round(10*time.Millisecond), retried, p50, p99, slices.Max(durations),
			callCount(rolloutCalls), verbs(rolloutCalls), callCount(idleCalls), verbs(idleCalls), callCount(restartCalls), verbs(restartCalls), restartRuns+1)
	}
}

// BenchmarkArgoTrafficSetWeight times the traffic router's SetWeight, called over go-plugin's
// net/rpc and gob in Argo's reconciles (UpdateHash, SetWeight, VerifyWeight), through weights 10
// to 90 of a 100-pod StatefulSet and full promotion, with five idle reconciles after each hold
// as Argo makes while a step pauses; then counts the API requests of one reconcile of the
// Healthy Rollout (RemoveManagedRoutes, UpdateHash(new, new), SetWeight(0), VerifyWeight(0)).
func BenchmarkArgoTrafficSetWeight(b *testing.B) {
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		createTarget(b, ns)
		e, counter := pluginEngine(b)
		ro := argoRollout(ns, hashV1, hashV2)
		ro.Spec.Strategy.Canary = &argov1alpha1.CanaryStrategy{TrafficRouting: &argov1alpha1.RolloutTrafficRouting{
			Plugins: map[string]json.RawMessage{traffic.Name: mustJSON(b, map[string]any{
				"target":         map[string]any{"kind": "StatefulSet", "name": argoTarget},
				"maxUnavailable": "10%",
				"soak":           "1s",
			})}}}
		tp := serveTraffic(b, traffic.New(func() (*rollout.Driver, error) { return &rollout.Driver{Engine: e}, nil }, nil))
		b.StartTimer()

		var all, idle []time.Duration
		idleCalls := map[string]int{}
		idleReconciles := 0
		start := time.Now()
		// reconcile is one Argo reconcile; it reports whether the weight is verified.
		reconcile := func(canary, stable string, weight int32) (bool, time.Duration) {
			b.Helper()
			if err := tp.UpdateHash(ro, canary, stable, nil); err.HasError() {
				b.Fatalf("UpdateHash(%s, %s): %s", canary, stable, err.ErrorString)
			}
			t0 := time.Now()
			err := tp.SetWeight(ro, weight, nil)
			d := time.Since(t0)
			if err.HasError() {
				b.Fatalf("SetWeight(%d): %s", weight, err.ErrorString)
			}
			v, err := tp.VerifyWeight(ro, weight, nil)
			if err.HasError() {
				b.Fatalf("VerifyWeight(%d): %s", weight, err.ErrorString)
			}
			return v == types.Verified, d
		}
		// hold reconciles until the weight is verified, then five times more, idle.
		hold := func(canary, stable string, weight int32) {
			b.Helper()
			for began := time.Now(); ; {
				ok, d := reconcile(canary, stable, weight)
				all = append(all, d)
				if ok {
					break
				}
				if time.Since(began) > phaseBound {
					b.Fatalf("weight %d not verified after %s", weight, phaseBound)
				}
				time.Sleep(callEvery)
			}
			for range 5 {
				time.Sleep(callEvery)
				before := counter.snapshot()
				ok, d := reconcile(canary, stable, weight)
				if !ok {
					b.Fatalf("weight %d no longer verified on an idle reconcile", weight)
				}
				all, idle = append(all, d), append(idle, d)
				for k, n := range since(before, counter.snapshot()) {
					idleCalls[k] += n
				}
				idleReconciles++
			}
		}
		for w := int32(10); w < 100; w += 10 {
			hold(hashV2, hashV1, w)
		}
		// Full promotion: Argo never sends 100 but equal hashes, with weight 0.
		hold(hashV2, hashV2, 0)
		wall := time.Since(start)
		b.StopTimer()
		rolloutCalls := counter.snapshot()
		onTarget(b, ns, imageV2)

		// The Healthy Rollout's reconcile, as Argo repeats it for as long as the Rollout lives.
		ro.Status.StableRS = hashV2
		const healthyReconciles = 10
		before := counter.snapshot()
		for range healthyReconciles {
			if tp.Type() != traffic.Name {
				b.Fatalf("Type() = %q, want %q", tp.Type(), traffic.Name)
			}
			if err := tp.RemoveManagedRoutes(ro); err.HasError() {
				b.Fatalf("RemoveManagedRoutes: %s", err.ErrorString)
			}
			if ok, _ := reconcile(hashV2, hashV2, 0); !ok {
				b.Fatal("the Healthy Rollout's weight 0 is not verified")
			}
		}
		healthy := since(before, counter.snapshot())

		p50, p99 := benchstat.Percentile(all, 50), benchstat.Percentile(all, 99)
		ip50, ip99 := benchstat.Percentile(idle, 50), benchstat.Percentile(idle, 99)
		perReconcile := float64(callCount(healthy)) / healthyReconciles
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		b.ReportMetric(ms(ip50), "idle-p50-ms")
		b.ReportMetric(ms(ip99), "idle-p99-ms")
		b.ReportMetric(float64(len(all)), "setweight-calls")
		b.ReportMetric(float64(callCount(rolloutCalls))/argoPods, "api-calls/pod")
		b.ReportMetric(perReconcile, "api-calls/reconcile")
		b.Logf("traffic SetWeight on %d pods, weights 10..90 and full promotion in %s: %d calls, p50 %s, p99 %s, max %s; the rollout's API calls: %d %s; idle after a hold: %d calls, p50 %s, p99 %s, %s over %d reconciles; Healthy reconcile: %.1f API calls (%s over %d)",
			argoPods, wall.Round(10*time.Millisecond), len(all), p50, p99, slices.Max(all), callCount(rolloutCalls), verbs(rolloutCalls), len(idle), ip50, ip99, verbs(idleCalls), idleReconciles,
			perReconcile, verbs(healthy), healthyReconciles)
	}
}

// createTarget creates the StatefulSet web of argoPods pods on imageV1 and waits until they are
// Ready.
func createTarget(b *testing.B, ns string) {
	b.Helper()
	labels := map[string]string{"app": argoTarget}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: argoTarget, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](argoPods), ServiceName: argoTarget, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}}},
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating StatefulSet %s/%s: %v", ns, argoTarget, err)
	}
	cluster.WaitFor(b, 5*time.Minute, fmt.Sprintf("%d ready pods", argoPods), func(ctx context.Context) (bool, error) {
		s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, argoTarget, metav1.GetOptions{})
		return err == nil && s.Status.ReadyReplicas == argoPods, err
	})
}

// onTarget fails the benchmark unless every pod of the target runs image and the StatefulSet's
// template names it: the rollout the calls were timed against really happened.
func onTarget(b *testing.B, ns, image string) {
	b.Helper()
	ctx := context.Background()
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + argoTarget})
	if err != nil {
		b.Fatalf("listing the pods of %s/%s: %v", ns, argoTarget, err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image == image {
			n++
		}
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, argoTarget, metav1.GetOptions{})
	if err != nil {
		b.Fatalf("reading StatefulSet %s/%s: %v", ns, argoTarget, err)
	}
	if n != argoPods || sts.Spec.Template.Spec.Containers[0].Image != image {
		b.Fatalf("after the rollout %d of %d pods run %s and the template names %s", n, len(pods.Items), image, sts.Spec.Template.Spec.Containers[0].Image)
	}
}

// pluginEngine is an engine as the plugin process builds it from its kubeconfig (cmd's
// pluginEngine: plugin.ClientQPS and ClientBurst, JSON, Events recorded), on the test cluster,
// with every request it sends counted.
func pluginEngine(b *testing.B) (*rollout.Engine, *apiCounter) {
	b.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = plugin.ClientQPS, plugin.ClientBurst
	counter := &apiCounter{counts: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, counter: counter} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatalf("building the plugin's client: %v", err)
	}
	events, err := inplace.NewEventBroadcaster(client, func(err error) { b.Logf("event not recorded: %v", err) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = events.Close(0) })
	// Events are written in the background: a count includes those of the calls made so far.
	counter.flush = func() {
		if err := events.Flush(time.Minute); err != nil {
			b.Errorf("counting API calls: %v", err)
		}
	}
	return &rollout.Engine{Client: client, Events: events.Recorder("argo-step")}, counter
}

// argoRollout is the Rollout NS/web as Argo passes it mid-revision: revision 2 on imageV2, from
// the stable hash to the canary hash. The caller sets its strategy.
func argoRollout(ns, stable, canary string) *argov1alpha1.Rollout {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: argoTarget, Namespace: ns,
		Annotations: map[string]string{"rollout.argoproj.io/revision": "2"}}}
	ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: imageV2}}
	ro.Status.StableRS, ro.Status.CurrentPodHash = stable, canary
	return ro
}

// serveStep serves p over go-plugin's in-process harness, net/rpc and gob as Argo's controller
// talks to it, and returns the controller's side, initialized.
func serveStep(b *testing.B, p *step.Plugin) steprpc.StepPlugin {
	b.Helper()
	b.Cleanup(p.Close)
	sp := dispense[steprpc.StepPlugin](b, step.Handshake, step.PluginMap(p), step.PluginMap(nil), "RpcStepPlugin")
	if err := sp.InitPlugin(); err.HasError() {
		b.Fatalf("InitPlugin: %s", err.ErrorString)
	}
	return sp
}

// serveTraffic is serveStep for the traffic router.
func serveTraffic(b *testing.B, p *traffic.Plugin) trafficrpc.TrafficRouterPlugin {
	b.Helper()
	tp := dispense[trafficrpc.TrafficRouterPlugin](b, traffic.Handshake, traffic.PluginMap(p), traffic.PluginMap(nil), "RpcTrafficRouterPlugin")
	if err := tp.InitPlugin(); err.HasError() {
		b.Fatalf("InitPlugin: %s", err.ErrorString)
	}
	return tp
}

// dispense serves plugins in this process and returns the client of the one named name.
func dispense[T any](b *testing.B, hs goplugin.HandshakeConfig, server, client map[string]goplugin.Plugin, name string) T {
	b.Helper()
	raw := plugintest.Serve(b, hs, server, client, name)
	out, ok := raw.(T)
	if !ok {
		b.Fatalf("dispensed %T, want %T", raw, out)
	}
	return out
}

// apiCounter counts requests to the apiserver by verb and resource, as "get statefulsets" or
// "patch pods/status".
type apiCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// flush, when not nil, waits for the requests under way in the background.
	flush func()
}

// countingTransport is an http.RoundTripper that counts each request in counter, then sends it.
type countingTransport struct {
	next    http.RoundTripper
	counter *apiCounter
}

// RoundTrip counts r and sends it.
func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := requestKind(r)
	t.counter.mu.Lock()
	t.counter.counts[key]++
	t.counter.mu.Unlock()
	return t.next.RoundTrip(r)
}

func (c *apiCounter) snapshot() map[string]int {
	if c.flush != nil {
		c.flush()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// requestKind names a request to the apiserver by its Kubernetes verb and resource.
func requestKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return r.Method + " " + r.URL.Path
	}
	if len(rest) > 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return r.Method + " " + r.URL.Path
	}
	resource, named := rest[0], len(rest) > 1
	if len(rest) > 2 {
		resource += "/" + rest[2]
	}
	verb := strings.ToLower(r.Method)
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodDelete:
		if !named {
			verb = "deletecollection"
		}
	}
	return verb + " " + resource
}

func callCount(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// verbs formats counts as "[get statefulsets=1 list pods=2]", sorted.
func verbs(counts map[string]int) string {
	keys := slices.Sorted(maps.Keys(counts))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s=%d", k, counts[k])
	}
	return "[" + strings.Join(out, " ") + "]"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mustJSON(b *testing.B, v any) json.RawMessage {
	b.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func TestRequestKind(t *testing.T) {
	for _, tt := range []struct {
		method, url, want string
	}{
		{"GET", "/apis/apps/v1/namespaces/ns/statefulsets/web", "get statefulsets"},
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=app%3Dweb", "list pods"},
		{"GET", "/api/v1/namespaces/ns/pods?watch=true", "watch pods"},
		{"PATCH", "/api/v1/namespaces/ns/pods/web-0", "patch pods"},
		{"PATCH", "/api/v1/namespaces/ns/pods/web-0/status", "patch pods/status"},
		{"POST", "/api/v1/namespaces/ns/events", "create events"},
		{"PUT", "/apis/apps/v1/namespaces/ns/statefulsets/web", "update statefulsets"},
		{"DELETE", "/api/v1/namespaces/ns/pods/web-0", "delete pods"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "deletecollection pods"},
		{"GET", "/api/v1/namespaces/ns", "get namespaces"},
		{"GET", "/api/v1/nodes", "list nodes"},
		{"GET", "/version", "GET /version"},
	} {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			r, err := http.NewRequest(tt.method, "https://127.0.0.1:6443"+tt.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := requestKind(r); got != tt.want {
				t.Errorf("requestKind = %q, want %q", got, tt.want)
			}
		})
	}
}
