package step

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argorpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
	"github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

const (
	testNS  = plugintest.Namespace
	stsName = plugintest.StsName
	imageV1 = plugintest.ImageV1
	imageV2 = plugintest.ImageV2
	// goodConfig rolls the StatefulSet web to imageV2.
	goodConfig = `{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"reg.example/app:v2"}}`
)

func ptr[T any](v T) *T { return &v }

// newClient is a fake API server with the StatefulSet web of n pods on imageV1.
func newClient(t *testing.T, n int) *fake.Clientset { return plugintest.NewClient(t, n) }

// writes lists the write actions the fake API server received.
func writes(client *fake.Clientset) []string { return plugintest.Writes(client) }

// playKubelet makes every read of pods see them as a kubelet reports them once it restarted
// their containers on the images of their spec.
func playKubelet(t *testing.T, client *fake.Clientset) { plugintest.PlayKubelet(t, client) }

// serve serves p over go-plugin's in-process harness, as Argo's controller talks to it, and
// returns the client side.
func serve(t *testing.T, p *Plugin) argorpc.StepPlugin {
	t.Helper()
	raw := plugintest.Serve(t, Handshake, PluginMap(p), PluginMap(nil), "RpcStepPlugin")
	sp, ok := raw.(argorpc.StepPlugin)
	if !ok {
		t.Fatalf("dispensed %T, want rpc.StepPlugin", raw)
	}
	return sp
}

// newPlugin is a plugin on client that scans nothing, its drivers stopped when the test ends.
func newPlugin(t *testing.T, client *fake.Clientset, budget time.Duration) *Plugin {
	t.Helper()
	return newPluginWith(t, Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}, ErrorBudget: budget}}, Options{})
}

// newPluginWith is a plugin on clients, its scan and drivers stopped when the test ends.
func newPluginWith(t *testing.T, clients Clients, opts Options) *Plugin {
	t.Helper()
	p := New(func() (Clients, error) { return clients, nil }, opts)
	t.Cleanup(func() {
		p.Close()
		p.drivers.StopAll()
	})
	return p
}

// argoRollout is a Rollout as it arrives over gob: zero values dropped, so replicas 0 and
// currentStepIndex 0 are nil. stable is status.stableRS, empty on the Rollout's creation.
func argoRollout(stable string) *argov1alpha1.Rollout {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "shop-web", Namespace: testNS}}
	ro.Spec.Replicas = ptr(int32(0))
	ro.Status.StableRS = stable
	ro.Status.CurrentPodHash = "85c5855485"
	ro.Status.CurrentStepIndex = ptr(int32(0))
	return ro
}

func stepContext(config string, status json.RawMessage) *types.RpcStepContext {
	c := &types.RpcStepContext{PluginName: Name, Status: status}
	if config != "" {
		c.Config = json.RawMessage(config)
	}
	return c
}

// testKey names the rollout of the test's Rollout and StatefulSet.
var testKey = drivers.Key{Holder: "argo:" + testNS + "/shop-web", Target: "StatefulSet " + testNS + "/" + stsName}

// driverOf returns the plugin's driver for the test's Rollout and StatefulSet.
func driverOf(t *testing.T, p *Plugin) *driver {
	t.Helper()
	d := p.drivers.Get(testKey)
	if d == nil {
		t.Fatalf("no driver for the test's rollout; %d drivers", p.drivers.Len())
	}
	return d
}

// Each bad call is Failed, or Successful with nothing to do: never Error, never an RpcError Argo
// would retry forever. Nothing is written but, for a Failed call, one Warning Event on the
// Rollout that says what Run said, recorded once however often Argo calls.
func TestRunBadInput(t *testing.T) {
	tests := []struct {
		name    string
		ro      *argov1alpha1.Rollout
		ctx     *types.RpcStepContext
		phase   types.StepPhase
		message string
	}{
		{"no context (gob nil)", argoRollout("65f9bfd99b"), nil, types.PhaseFailed, "plugin.config of Rollout shop/shop-web is empty"},
		{"nil config", argoRollout("65f9bfd99b"), stepContext("", nil), types.PhaseFailed, "plugin.config of Rollout shop/shop-web is empty"},
		{"null config", argoRollout("65f9bfd99b"), stepContext("null", nil), types.PhaseFailed, "plugin.config of Rollout shop/shop-web is empty"},
		{"unknown field", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"batchez":["50%"]}`, nil), types.PhaseFailed, "batchez"},
		{"wrong type", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"maxUnavailable":true}`, nil), types.PhaseFailed, "maxUnavailable"},
		{"bad kind", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"Job","name":"web"},"images":{"app":"x:2"}}`, nil), types.PhaseFailed, "spec.target.kind"},
		{"credential file", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"analysis":{"prometheus":{"address":"http://prom:9090","bearerTokenFile":"/etc/token"}}}`, nil),
			types.PhaseFailed, "bearerTokenFile"},
		{"inline password", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"analysis":{"prometheus":{"address":"http://prom:9090","basicAuth":{"username":"u","password":"hunter2-inline"}}}}`, nil),
			types.PhaseFailed, "analysis.prometheus.basicAuth.passwordSecret"},
		{"inline bearer token", argoRollout("65f9bfd99b"),
			stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"analysis":{"prometheus":{"address":"http://prom:9090","headers":{"Authorization":"Bearer hunter2-inline"}}}}`, nil),
			types.PhaseFailed, "prometheus.bearerTokenSecret"},
		{"first revision", argoRollout(""), stepContext(goodConfig, nil), types.PhaseSuccessful, "first revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, 1)
			sp := serve(t, newPlugin(t, client, 0))
			res, rpcErr := sp.Run(tt.ro, tt.ctx)
			if rpcErr.HasError() {
				t.Fatalf("Run: RpcError %q, want phase %s", rpcErr.ErrorString, tt.phase)
			}
			if res.Phase != tt.phase || !strings.Contains(res.Message, tt.message) {
				t.Errorf("Run = %s %q, want %s with %q", res.Phase, res.Message, tt.phase, tt.message)
			}
			if strings.Contains(res.Message, "hunter2-inline") {
				t.Errorf("Run's message shows the credential: %q", res.Message)
			}
			if again, _ := sp.Run(tt.ro, tt.ctx); again.Phase != res.Phase || again.Message != res.Message {
				t.Errorf("Run again = %s %q, want the same verdict %s %q", again.Phase, again.Message, res.Phase, res.Message)
			}
			var want []string
			if tt.phase == types.PhaseFailed {
				want = []string{"create events", "create events"} // the second finds the first there
				checkInvalidConfigEvents(t, client, tt.ro, res.Message)
			}
			if w := writes(client); !slices.Equal(w, want) {
				t.Errorf("Run twice wrote %v, want %v", w, want)
			}
		})
	}
}

// Run starts one driver per rollout however many calls arrive, at once or one after the other,
// and reports Running with a requeue Argo keeps (above 10s) while it moves.
func TestRunFindsItsDriver(t *testing.T) {
	client := newClient(t, 2)
	p := newPlugin(t, client, 0)
	sp := serve(t, p)

	first, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if rpcErr.HasError() || first.Phase != types.PhaseRunning {
		t.Fatalf("first Run = %s %q, RpcError %q; want Running", first.Phase, first.Message, rpcErr.ErrorString)
	}
	if first.RequeueAfter <= 10*time.Second {
		t.Errorf("RequeueAfter = %s, want above 10s (Argo turns less into 30s)", first.RequeueAfter)
	}
	d := driverOf(t, p)

	var wg sync.WaitGroup
	results := make([]types.RpcStepResult, 8)
	errs := make([]types.RpcError, 8)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, first.Status)) })
	}
	wg.Wait()
	for i := range results {
		if errs[i].HasError() || results[i].Phase != types.PhaseRunning {
			t.Errorf("Run %d = %s %q, RpcError %q; want Running", i, results[i].Phase, results[i].Message, errs[i].ErrorString)
		}
		var st StepStatus
		if err := json.Unmarshal(results[i].Status, &st); err != nil {
			t.Errorf("Run %d: status %s is not a StepStatus: %v", i, results[i].Status, err)
		}
	}
	if got := driverOf(t, p); got != d {
		t.Error("a later Run started another driver for the same rollout")
	}
	if n := p.drivers.Len(); n != 1 {
		t.Errorf("%d drivers, want 1", n)
	}
}

// A rollout the engine finishes is Successful; its status names the rollout and its counts.
func TestRunSucceeds(t *testing.T) {
	client := newClient(t, 0)
	p := newPlugin(t, client, 0)
	sp := serve(t, p)
	res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if rpcErr.HasError() {
		t.Fatalf("Run: RpcError %q", rpcErr.ErrorString)
	}
	<-driverOf(t, p).Done()
	res, rpcErr = sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, res.Status))
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run after the driver ended = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	var st StepStatus
	if err := json.Unmarshal(res.Status, &st); err != nil {
		t.Fatal(err)
	}
	if st.Phase != rollout.PhaseSucceeded || st.RolloutID == "" {
		t.Errorf("status = %+v, want phase Succeeded with a rolloutID", st)
	}
	sts, err := client.AppsV1().StatefulSets(testNS).Get(context.Background(), stsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != imageV2 {
		t.Errorf("template image %s, want %s", got, imageV2)
	}
}

// An API server in trouble past the engine's error budget is an RpcError (Argo retries Run),
// never Phase Error; and a failing engine start is one too.
func TestEngineErrorIsRpcError(t *testing.T) {
	t.Run("API unavailable", func(t *testing.T) {
		client := newClient(t, 1)
		client.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("injected: etcd unavailable")
		})
		p := newPlugin(t, client, time.Nanosecond)
		sp := serve(t, p)
		res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
		if rpcErr.HasError() || res.Phase != types.PhaseRunning {
			t.Fatalf("first Run = %s, RpcError %q; want Running", res.Phase, rpcErr.ErrorString)
		}
		d := driverOf(t, p)
		_, err := d.Wait()
		var unavailable *rollout.APIUnavailableError
		if !errors.As(err, &unavailable) {
			t.Fatalf("driver ended with %v, want an *rollout.APIUnavailableError", err)
		}
		res, rpcErr = sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, res.Status))
		if !rpcErr.HasError() || !strings.Contains(rpcErr.ErrorString, "etcd unavailable") {
			t.Errorf("Run RpcError = %q, want the engine's error", rpcErr.ErrorString)
		}
		if res.Phase == types.PhaseError {
			t.Error("Run returned Phase Error, which wedges the step")
		}
		if n := p.drivers.Len(); n != 0 {
			t.Errorf("%d drivers after the error, want 0 (the next Run starts afresh)", n)
		}
	})
	t.Run("no engine", func(t *testing.T) {
		p := New(func() (Clients, error) { return Clients{}, errors.New("no kubeconfig") }, Options{})
		sp := serve(t, p)
		if err := sp.InitPlugin(); !strings.Contains(err.ErrorString, "no kubeconfig") {
			t.Errorf("InitPlugin = %q, want the engine's error", err.ErrorString)
		}
		res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
		if !strings.Contains(rpcErr.ErrorString, "no kubeconfig") || res.Phase == types.PhaseError {
			t.Errorf("Run = %s, RpcError %q; want an RpcError with the engine's error", res.Phase, rpcErr.ErrorString)
		}
	})
}

// Abort answers within the call, Successful or Failed: Argo turns Running into Failed and never
// calls Abort again.
func TestAbortNeverRunning(t *testing.T) {
	tests := []struct {
		name  string
		pods  int
		run   bool // Run the step first
		ro    *argov1alpha1.Rollout
		ctx   *types.RpcStepContext
		phase types.StepPhase
	}{
		{"bad config", 1, false, argoRollout("65f9bfd99b"), stepContext(`{"batchez":1}`, nil), types.PhaseSuccessful},
		{"no context", 1, false, argoRollout("65f9bfd99b"), nil, types.PhaseSuccessful},
		{"first revision", 1, false, argoRollout(""), stepContext(goodConfig, nil), types.PhaseSuccessful},
		{"rolled out", 0, true, argoRollout("65f9bfd99b"), stepContext(goodConfig, nil), types.PhaseSuccessful},
		{"never ran", 1, false, argoRollout("65f9bfd99b"), stepContext(goodConfig, nil), types.PhaseFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, tt.pods)
			p := newPlugin(t, client, 0)
			sp := serve(t, p)
			if tt.run {
				if _, rpcErr := sp.Run(tt.ro, tt.ctx); rpcErr.HasError() {
					t.Fatalf("Run: %s", rpcErr.ErrorString)
				}
				<-driverOf(t, p).Done()
			}
			res, rpcErr := sp.Abort(tt.ro, tt.ctx)
			if rpcErr.HasError() {
				t.Fatalf("Abort: RpcError %q, want phase %s", rpcErr.ErrorString, tt.phase)
			}
			if res.Phase != tt.phase {
				t.Errorf("Abort = %s %q, want %s", res.Phase, res.Message, tt.phase)
			}
			if tt.run {
				sts, err := client.AppsV1().StatefulSets(testNS).Get(context.Background(), stsName, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := sts.Spec.Template.Spec.Containers[0].Image; got != imageV1 {
					t.Errorf("after Abort the template runs %s, want %s back", got, imageV1)
				}
			}
		})
	}
}

// Terminate leaves the pods as they are and stops the driver: Successful.
func TestTerminateStopsDriver(t *testing.T) {
	client := newClient(t, 2)
	p := newPlugin(t, client, 0)
	sp := serve(t, p)
	if res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil)); rpcErr.HasError() || res.Phase != types.PhaseRunning {
		t.Fatalf("Run = %s, RpcError %q; want Running", res.Phase, rpcErr.ErrorString)
	}
	d := driverOf(t, p)
	res, rpcErr := sp.Terminate(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Terminate = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	if !d.Finished() {
		t.Error("the driver still runs after Terminate")
	}
}

// A step whose rollout moves pods runs to Successful; Abort afterwards puts every pod back on
// its old image within the call.
func TestRunThenAbort(t *testing.T) {
	client := newClient(t, 2)
	playKubelet(t, client)
	p := newPlugin(t, client, 0)
	sp := serve(t, p)
	res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if rpcErr.HasError() {
		t.Fatalf("Run: RpcError %q", rpcErr.ErrorString)
	}
	d := driverOf(t, p)
	<-d.Done()
	res, rpcErr = sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, res.Status))
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run after the driver ended = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	podImages := func() []string {
		t.Helper()
		pods, err := client.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods.Items {
			out = append(out, p.Name+"="+p.Spec.Containers[0].Image)
		}
		slices.Sort(out)
		return out
	}
	if got, want := strings.Join(podImages(), " "), "web-0="+imageV2+" web-1="+imageV2; got != want {
		t.Fatalf("after the rollout pods run %s, want %s", got, want)
	}
	res, rpcErr = sp.Abort(argoRollout("65f9bfd99b"), stepContext(goodConfig, res.Status))
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Abort = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	// A revert pins the digest the pod ran before.
	v1 := plugintest.ImageIDOf(imageV1)
	for _, got := range podImages() {
		if _, image, _ := strings.Cut(got, "="); image != imageV1 && image != v1 {
			t.Errorf("after Abort pod %s, want it on %s", got, imageV1)
		}
	}
}

// A Run with another config for the same rollout (Argo restarts the steps on a template change,
// with no Abort) starts a new driver, and the old one stops: never two at once.
func TestNewConfigReplacesDriver(t *testing.T) {
	client := newClient(t, 2)
	p := newPlugin(t, client, 0)
	sp := serve(t, p)
	if res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil)); rpcErr.HasError() || res.Phase != types.PhaseRunning {
		t.Fatalf("Run = %s, RpcError %q; want Running", res.Phase, rpcErr.ErrorString)
	}
	old := driverOf(t, p)
	v3 := strings.Replace(goodConfig, imageV2, "reg.example/app:v3", 1)
	if res, rpcErr := sp.Run(argoRollout("65f9bfd99b"), stepContext(v3, nil)); rpcErr.HasError() || res.Phase != types.PhaseRunning {
		t.Fatalf("Run with v3 = %s, RpcError %q; want Running", res.Phase, rpcErr.ErrorString)
	}
	if driverOf(t, p) == old {
		t.Fatal("a Run with another config kept the old driver")
	}
	if _, err := old.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("the old driver ended with %v, want it stopped (context.Canceled)", err)
	}
}

// checkInvalidConfigEvents checks that the Rollout ro has exactly one Event: a Warning
// InvalidConfig on it, saying msg.
func checkInvalidConfigEvents(t *testing.T, client *fake.Clientset, ro *argov1alpha1.Rollout, msg string) {
	t.Helper()
	events, err := client.CoreV1().Events(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("%d Events, want 1: %v", len(events.Items), events.Items)
	}
	ev := events.Items[0]
	obj := ev.InvolvedObject
	if obj.Kind != "Rollout" || obj.APIVersion != "argoproj.io/v1alpha1" || obj.Namespace != ro.Namespace || obj.Name != ro.Name || obj.UID != ro.UID {
		t.Errorf("the Event is about %+v, want Rollout %s/%s (UID %q)", obj, ro.Namespace, ro.Name, ro.UID)
	}
	if ev.Type != "Warning" || ev.Reason != "InvalidConfig" || ev.Message != msg {
		t.Errorf("Event %s %s %q, want Warning InvalidConfig %q", ev.Type, ev.Reason, ev.Message, msg)
	}
}

// An invalid config on the Rollout's first revision: Argo goes Healthy whatever Run returns, so
// Run's Failed says so, and a Warning Event on the Rollout carries it where kubectl describe
// shows it; once per generation of the Rollout, so the next generation gets its own.
func TestRunInvalidConfigOnFirstRevision(t *testing.T) {
	client := newClient(t, 1)
	sp := serve(t, newPlugin(t, client, 0))
	bad := stepContext(`{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"x:2"},"batchez":["50%"]}`, nil)
	ro := argoRollout("")
	ro.UID, ro.Generation = "uid-shop-web", 1

	res, rpcErr := sp.Run(ro, bad)
	if rpcErr.HasError() || res.Phase != types.PhaseFailed {
		t.Fatalf("Run = %s %q, RpcError %q; want Failed", res.Phase, res.Message, rpcErr.ErrorString)
	}
	for _, want := range []string{"steps[].plugin.config of Rollout shop/shop-web", "batchez", "first revision", "until its config is fixed"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("Run's message %q does not say %q", res.Message, want)
		}
	}
	checkInvalidConfigEvents(t, client, ro, res.Message)

	next := argoRollout("65f9bfd99b")
	next.UID, next.Generation = ro.UID, 2
	res, _ = sp.Run(next, bad)
	if res.Phase != types.PhaseFailed || strings.Contains(res.Message, "first revision") {
		t.Errorf("Run on the next revision = %s %q, want Failed, about the config alone", res.Phase, res.Message)
	}
	events, err := client.CoreV1().Events(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 2 {
		t.Errorf("%d Events after a Run on a new generation, want 2", len(events.Items))
	}
}
