package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argorpc "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/internal/drivers"
	pt "github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

const (
	// goodConfig drives the StatefulSet web; the images are the Rollout's template's.
	goodConfig = `{"target":{"kind":"StatefulSet","name":"web"}}`
	// Pod template hashes of the Rollout's revisions.
	hashV1 = "6555f8f8c4"
	hashV2 = "559d799c77"
)

// serve serves p over go-plugin's in-process harness, as Argo's controller talks to it, and
// returns the client side.
func serve(t testing.TB, p *Plugin) argorpc.TrafficRouterPlugin {
	t.Helper()
	raw := pt.Serve(t, Handshake, PluginMap(p), PluginMap(nil), "RpcTrafficRouterPlugin")
	tp, ok := raw.(argorpc.TrafficRouterPlugin)
	if !ok {
		t.Fatalf("dispensed %T, want rpc.TrafficRouterPlugin", raw)
	}
	return tp
}

// newPlugin is a plugin on client, its drivers stopped when the test ends.
func newPlugin(t testing.TB, client *fake.Clientset) *Plugin {
	t.Helper()
	return newPluginOf(t, &rollout.Driver{Engine: &rollout.Engine{Client: client}})
}

// newPluginOf is a plugin on e, its drivers stopped when the test ends.
func newPluginOf(t testing.TB, e *rollout.Driver) *Plugin {
	t.Helper()
	p := New(func() (*rollout.Driver, error) { return e, nil }, nil)
	t.Cleanup(p.drivers.StopAll)
	return p
}

// argoRollout is the Rollout shop/shop-web as it arrives over gob: zero values dropped, so
// spec.replicas and status.currentStepIndex are nil. Its template runs image; stable and canary
// are status.stableRS and status.currentPodHash.
func argoRollout(config, image, stable, canary string) *argov1alpha1.Rollout {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "shop-web", Namespace: pt.Namespace,
		Annotations: map[string]string{"rollout.argoproj.io/revision": "2"}}}
	ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: pt.Container, Image: image}}
	ro.Spec.Strategy.Canary = &argov1alpha1.CanaryStrategy{TrafficRouting: &argov1alpha1.RolloutTrafficRouting{}}
	if config != "" {
		ro.Spec.Strategy.Canary.TrafficRouting.Plugins = map[string]json.RawMessage{Name: json.RawMessage(config)}
	}
	ro.Status.StableRS, ro.Status.CurrentPodHash = stable, canary
	return ro
}

// reconcile makes the calls of one Argo reconcile, as the controller does: UpdateHash, then
// SetWeight and VerifyWeight of weight. It fails the test on an RpcError of UpdateHash or
// SetWeight.
func reconcile(t testing.TB, tp argorpc.TrafficRouterPlugin, ro *argov1alpha1.Rollout, canary, stable string, weight int32) (types.RpcVerified, types.RpcError) {
	t.Helper()
	if err := tp.UpdateHash(ro, canary, stable, nil); err.HasError() {
		t.Fatalf("UpdateHash: %s", err.ErrorString)
	}
	if err := tp.SetWeight(ro, weight, nil); err.HasError() {
		t.Fatalf("SetWeight(%d): %s", weight, err.ErrorString)
	}
	return tp.VerifyWeight(ro, weight, nil)
}

// driverOf returns the plugin's driver for the test's Rollout and StatefulSet.
func driverOf(t testing.TB, p *Plugin) *driver {
	t.Helper()
	d := p.drivers.Get(drivers.Key{Holder: "argo:" + pt.Namespace + "/shop-web", Target: "StatefulSet " + pt.Namespace + "/" + pt.StsName})
	if d == nil {
		t.Fatalf("no driver for the test's rollout; %d drivers", p.drivers.Len())
	}
	return d
}

func driverCount(p *Plugin) int {
	return p.drivers.Len()
}

// onImage counts the pods whose spec runs image.
func onImage(t *testing.T, client *fake.Clientset, image string) int {
	t.Helper()
	n := 0
	for _, p := range pt.PodImages(t, client) {
		if strings.HasSuffix(p, "="+image) {
			n++
		}
	}
	return n
}

// gate blocks every GET of the StatefulSet until it is opened, so that a test sees a driver
// that has not moved yet.
func gate(client *fake.Clientset) (open func()) {
	ch := make(chan struct{})
	client.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-ch
		return false, nil, nil
	})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// setWeight 20 then 50 moves 20% then 50% of the pods, each NotVerified while it moves and
// Verified once held; full promotion moves the rest and hands the StatefulSet back; every later
// reconcile of the Healthy Rollout costs at most one GET and writes nothing.
func TestWeightsThenFullPromotion(t *testing.T) {
	client := pt.NewClient(t, 10)
	pt.PlayKubelet(t, client)
	open := gate(client)
	t.Cleanup(open)
	p := newPlugin(t, client)
	tp := serve(t, p)
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)

	// Argo's first calls of a new revision: weight 0 until the canary is available.
	if v, err := reconcile(t, tp, ro, hashV2, hashV1, 0); err.HasError() || v != types.Verified {
		t.Errorf("VerifyWeight(0) before the first step = %v, RpcError %q; want Verified", v, err.ErrorString)
	}
	if n := driverCount(p); n != 0 {
		t.Errorf("weight 0 of a new revision started %d drivers, want none", n)
	}

	for i, weight := range []int32{20, 50} {
		// Reconciles arrive at once, from several workers.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := tp.SetWeight(ro, weight, nil); err.HasError() {
					t.Errorf("SetWeight(%d): %s", weight, err.ErrorString)
				}
			})
		}
		wg.Wait()
		d := driverOf(t, p)
		if n := driverCount(p); n != 1 {
			t.Fatalf("%d drivers, want 1", n)
		}
		if i == 0 {
			if v, err := tp.VerifyWeight(ro, weight, nil); err.HasError() || v != types.NotVerified {
				t.Errorf("VerifyWeight(%d) while the driver waits = %v, RpcError %q; want NotVerified", weight, v, err.ErrorString)
			}
			open()
		}
		<-d.Done()
		if v, err := reconcile(t, tp, ro, hashV2, hashV1, weight); err.HasError() || v != types.Verified {
			t.Fatalf("VerifyWeight(%d) once held = %v, RpcError %q; want Verified (driver: %+v, %v)", weight, v, err.ErrorString, final(d), errOf(d))
		}
		if got, want := onImage(t, client, pt.ImageV2), int(weight)/10; got != want {
			t.Errorf("at weight %d, %d pods run %s, want %d: %v", weight, got, pt.ImageV2, want, pt.PodImages(t, client))
		}
		if driverOf(t, p) != d {
			t.Errorf("a repeated SetWeight(%d) replaced its settled driver", weight)
		}
	}

	// Full promotion: the stable hash is the canary's, weight 0.
	promoted := argoRollout(goodConfig, pt.ImageV2, hashV2, hashV2)
	reconcile(t, tp, promoted, hashV2, hashV2, 0)
	d := driverOf(t, p)
	<-d.Done()
	if v, err := reconcile(t, tp, promoted, hashV2, hashV2, 0); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(0) after full promotion = %v, RpcError %q; want Verified (driver: %+v, %v)", v, err.ErrorString, final(d), errOf(d))
	}
	if got := onImage(t, client, pt.ImageV2); got != 10 {
		t.Errorf("after full promotion %d pods run %s, want 10: %v", got, pt.ImageV2, pt.PodImages(t, client))
	}
	if got := pt.TemplateImage(t, client); got != pt.ImageV2 {
		t.Errorf("after full promotion the template runs %s, want %s", got, pt.ImageV2)
	}
	if final(d).Phase != rollout.PhaseSucceeded {
		t.Errorf("full promotion ended %s, want %s", final(d).Phase, rollout.PhaseSucceeded)
	}

	// Healthy: the same calls on every reconcile, forever.
	client.ClearActions()
	const reconciles = 5
	for range reconciles {
		if v, err := reconcile(t, tp, promoted, hashV2, hashV2, 0); err.HasError() || v != types.Verified {
			t.Errorf("VerifyWeight(0) of a Healthy Rollout = %v, RpcError %q; want Verified", v, err.ErrorString)
		}
	}
	var calls []string
	for _, a := range client.Actions() {
		calls = append(calls, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if len(calls) > reconciles {
		t.Errorf("%d reconciles of a Healthy Rollout made %d API calls (%v), want at most one each", reconciles, len(calls), calls)
	}
	for _, c := range calls {
		if c != "get statefulsets" {
			t.Errorf("a Healthy reconcile made %q, want only one get of the StatefulSet", c)
		}
	}
	if driverOf(t, p) != d {
		t.Error("a Healthy reconcile replaced the settled driver")
	}
}

// An abort (status.abort with the canary and stable hashes apart, weight 0) rolls every touched
// pod back; a repeated call finds the same rollback, done.
func TestAbortRollsBack(t *testing.T) {
	client := pt.NewClient(t, 4)
	pt.PlayKubelet(t, client)
	p := newPlugin(t, client)
	tp := serve(t, p)
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	reconcile(t, tp, ro, hashV2, hashV1, 50)
	<-driverOf(t, p).Done()
	if v, err := tp.VerifyWeight(ro, 50, nil); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(50) = %v, RpcError %q; want Verified", v, err.ErrorString)
	}
	if got := onImage(t, client, pt.ImageV2); got != 2 {
		t.Fatalf("at weight 50, %d pods run %s, want 2", got, pt.ImageV2)
	}

	aborted := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	aborted.Status.Abort = true
	reconcile(t, tp, aborted, hashV2, hashV1, 0)
	d := driverOf(t, p)
	if d.Job.op.kind != opAbort {
		t.Fatalf("the abort started a driver for %s, want abort", d.Job.op)
	}
	<-d.Done()
	if v, err := reconcile(t, tp, aborted, hashV2, hashV1, 0); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(0) after the rollback = %v, RpcError %q; want Verified (driver: %+v, %v)", v, err.ErrorString, final(d), errOf(d))
	}
	if final(d).Phase != rollout.PhaseRolledBack {
		t.Errorf("the abort ended %s, want %s", final(d).Phase, rollout.PhaseRolledBack)
	}
	v1 := pt.ImageIDOf(pt.ImageV1)
	for _, got := range pt.PodImages(t, client) {
		if _, image, _ := strings.Cut(got, "="); image != pt.ImageV1 && image != v1 {
			t.Errorf("after the abort pod %s, want it back on %s", got, pt.ImageV1)
		}
	}
	if got := pt.TemplateImage(t, client); got != pt.ImageV1 {
		t.Errorf("after the abort the template runs %s, want %s", got, pt.ImageV1)
	}
	client.ClearActions()
	reconcile(t, tp, aborted, hashV2, hashV1, 0)
	if w := pt.Writes(client); len(w) != 0 {
		t.Errorf("a repeated abort wrote %v, want nothing", w)
	}
	if driverOf(t, p) != d {
		t.Error("a repeated abort started another rollback")
	}
}

// A rollout that fails at its weight rolls back by itself; VerifyWeight then is an RpcError that
// names the Rollout, the target and the engine's reason.
func TestFailedWeightIsRpcError(t *testing.T) {
	client := pt.NewClient(t, 4)
	pt.PlayKubelet(t, client)
	p := newPlugin(t, client)
	tp := serve(t, p)
	ro := argoRollout(goodConfig, pt.ImageCrash, hashV1, hashV2)
	reconcile(t, tp, ro, hashV2, hashV1, 50)
	d := driverOf(t, p)
	<-d.Done()
	v, err := reconcile(t, tp, ro, hashV2, hashV1, 50)
	if v != types.NotVerified {
		t.Errorf("VerifyWeight(50) of a failed rollout = %v, want NotVerified", v)
	}
	for _, want := range []string{"shop/shop-web", "StatefulSet shop/web", string(rollout.ReasonPodFailed), "rolled back"} {
		if !strings.Contains(err.ErrorString, want) {
			t.Errorf("VerifyWeight RpcError %q does not name %q", err.ErrorString, want)
		}
	}
	if got := onImage(t, client, pt.ImageCrash); got != 0 {
		t.Errorf("%d pods still run %s after the rollback", got, pt.ImageCrash)
	}
}

// Calls that ask for nothing write nothing: the Rollout's first revision, weight 0 of a revision
// in progress (gob's nil zero values included), an abort with no rollout in flight.
func TestNothingToDo(t *testing.T) {
	first := argoRollout(goodConfig, pt.ImageV2, "", hashV2)
	revision1 := argoRollout(goodConfig, pt.ImageV2, hashV2, hashV2)
	revision1.Annotations["rollout.argoproj.io/revision"] = "1"
	gobNil := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	gobNil.Spec.Replicas, gobNil.Status.CurrentStepIndex, gobNil.Annotations = nil, nil, nil
	abortIdle := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	abortIdle.Status.Abort = true
	tests := []struct {
		name           string
		ro             *argov1alpha1.Rollout
		canary, stable string
		weight         int32
		// driver: a driver starts (it reads, and finds nothing to do).
		driver bool
	}{
		{"first creation, no stableRS", first, hashV2, "", 20, false},
		{"first revision", revision1, hashV2, hashV2, 0, false},
		{"weight 0 of a new revision", gobNil, hashV2, hashV1, 0, false},
		{"weight 0, no UpdateHash seen", gobNil, "", "", 0, false},
		{"abort with nothing in flight", abortIdle, hashV2, hashV1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := pt.NewClient(t, 2)
			p := newPlugin(t, client)
			tp := serve(t, p)
			if tt.canary != "" {
				if err := tp.UpdateHash(tt.ro, tt.canary, tt.stable, nil); err.HasError() {
					t.Fatalf("UpdateHash: %s", err.ErrorString)
				}
			}
			if err := tp.SetWeight(tt.ro, tt.weight, nil); err.HasError() {
				t.Fatalf("SetWeight: %s", err.ErrorString)
			}
			if tt.driver {
				<-driverOf(t, p).Done()
			} else if n := driverCount(p); n != 0 {
				t.Errorf("%d drivers started, want none", n)
			}
			if v, err := tp.VerifyWeight(tt.ro, tt.weight, nil); err.HasError() || v != types.Verified {
				t.Errorf("VerifyWeight = %v, RpcError %q; want Verified", v, err.ErrorString)
			}
			if w := pt.Writes(client); len(w) != 0 {
				t.Errorf("wrote %v, want nothing", w)
			}
		})
	}
}

// A bad config is an RpcError naming the Rollout and the field, from SetWeight and VerifyWeight
// alike, with nothing written and no driver started.
func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, config, field string
	}{
		{"no config", "", configField},
		{"null", "null", configField},
		{"images given", `{"target":{"kind":"StatefulSet","name":"web"},"images":{"app":"reg.example/app:v9"}}`, "images"},
		{"upTo given", `{"target":{"kind":"StatefulSet","name":"web"},"upTo":"20%"}`, "upTo"},
		{"resources given", `{"target":{"kind":"StatefulSet","name":"web"},"resources":{"app":{"requests":{"cpu":"1"}}}}`, "resources: the traffic router rolls out images alone"},
		{"fromRollout false", `{"target":{"kind":"StatefulSet","name":"web"},"fromRollout":false}`, "fromRollout"},
		{"unknown field", `{"target":{"kind":"StatefulSet","name":"web"},"batchez":["50%"]}`, "batchez"},
		{"wrong type", `{"target":{"kind":"StatefulSet","name":"web"},"maxUnavailable":true}`, "maxUnavailable"},
		{"bad kind", `{"target":{"kind":"Job","name":"web"}}`, "spec.target.kind"},
		{"not an object", `["web"]`, configField},
		{"inline password", `{"target":{"kind":"StatefulSet","name":"web"},"analysis":{"prometheus":{"address":"http://prom:9090","basicAuth":{"username":"u","password":"hunter2-inline"}}}}`,
			"analysis.prometheus.basicAuth.passwordSecret"},
		{"inline bearer token", `{"target":{"kind":"StatefulSet","name":"web"},"analysis":{"prometheus":{"address":"http://prom:9090","headers":{"Authorization":"Bearer hunter2-inline"}}}}`,
			"prometheus.bearerTokenSecret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := pt.NewClient(t, 1)
			p := newPlugin(t, client)
			tp := serve(t, p)
			ro := argoRollout(tt.config, pt.ImageV2, hashV1, hashV2)
			tp.UpdateHash(ro, hashV2, hashV1, nil)
			err := tp.SetWeight(ro, 20, nil)
			v, verr := tp.VerifyWeight(ro, 20, nil)
			for call, e := range map[string]types.RpcError{"SetWeight": err, "VerifyWeight": verr} {
				if !strings.Contains(e.ErrorString, "Rollout shop/shop-web") || !strings.Contains(e.ErrorString, tt.field) {
					t.Errorf("%s RpcError %q, want one naming Rollout shop/shop-web and %s", call, e.ErrorString, tt.field)
				}
				if strings.Contains(e.ErrorString, "hunter2-inline") {
					t.Errorf("%s RpcError shows the credential: %q", call, e.ErrorString)
				}
			}
			if v != types.NotVerified {
				t.Errorf("VerifyWeight = %v, want NotVerified", v)
			}
			if n := driverCount(p); n != 0 {
				t.Errorf("%d drivers started, want none", n)
			}
			if w := pt.Writes(client); len(w) != 0 {
				t.Errorf("wrote %v, want nothing", w)
			}
		})
	}
}

// TestSentinelResourcesLeftAlone: the Rollout's template is its sentinel pod's, whose cpu and
// memory are kept tiny: the traffic router rolls out the template's images and never its
// resources.
func TestSentinelResourcesLeftAlone(t *testing.T) {
	p := newPlugin(t, pt.NewClient(t, 1))
	ro := argoRollout(`{"target":{"kind":"StatefulSet","name":"web"}}`, pt.ImageV2, hashV1, hashV2)
	ro.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")}}
	req, err := p.decode(ro)
	if err != nil {
		t.Fatal(err)
	}
	if req.Spec.Images[pt.Container] != pt.ImageV2 || req.Spec.Resources != nil {
		t.Errorf("images %v, resources %v: want the template's images and no resources", req.Spec.Images, req.Spec.Resources)
	}
}

// Header and mirror routes are refused with what the plugin cannot do and why; the other calls
// have nothing to do.
func TestRoutes(t *testing.T) {
	tp := serve(t, newPlugin(t, pt.NewClient(t, 1)))
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	if got, want := tp.SetHeaderRoute(ro, &argov1alpha1.SetHeaderRoute{Name: "h"}).ErrorString,
		"inplace-rollout/traffic does not support header routes (setHeaderRoute): pods are updated in place, there is no second set of pods to route to"; got != want {
		t.Errorf("SetHeaderRoute = %q, want %q", got, want)
	}
	if got, want := tp.SetMirrorRoute(ro, &argov1alpha1.SetMirrorRoute{Name: "m"}).ErrorString,
		"inplace-rollout/traffic does not support mirror routes (setMirrorRoute): pods are updated in place, there is no second set of pods to route to"; got != want {
		t.Errorf("SetMirrorRoute = %q, want %q", got, want)
	}
	if err := tp.RemoveManagedRoutes(ro); err.HasError() {
		t.Errorf("RemoveManagedRoutes = %q, want no error", err.ErrorString)
	}
	if got := tp.Type(); got != Name {
		t.Errorf("Type = %q, want %q", got, Name)
	}
}

// An engine that cannot start is an RpcError from InitPlugin and from the calls that need it,
// which try again.
func TestNoEngine(t *testing.T) {
	tries := 0
	p := New(func() (*rollout.Driver, error) {
		tries++
		return nil, errors.New("no kubeconfig")
	}, nil)
	tp := serve(t, p)
	if err := tp.InitPlugin(); !strings.Contains(err.ErrorString, "no kubeconfig") {
		t.Errorf("InitPlugin = %q, want the engine's error", err.ErrorString)
	}
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	tp.UpdateHash(ro, hashV2, hashV1, nil)
	if err := tp.SetWeight(ro, 20, nil); !strings.Contains(err.ErrorString, "no kubeconfig") {
		t.Errorf("SetWeight = %q, want the engine's error", err.ErrorString)
	}
	if tries != 2 {
		t.Errorf("the engine was made %d times, want 2 (InitPlugin, then SetWeight again)", tries)
	}
}

// A new weight replaces the driver; the old one stops first: never two at once.
func TestNewWeightReplacesDriver(t *testing.T) {
	client := pt.NewClient(t, 4)
	pt.PlayKubelet(t, client)
	open := gate(client)
	t.Cleanup(open)
	p := newPlugin(t, client)
	tp := serve(t, p)
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	reconcile(t, tp, ro, hashV2, hashV1, 20)
	old := driverOf(t, p)
	reconcile(t, tp, ro, hashV2, hashV1, 50)
	d := driverOf(t, p)
	if d == old || d.Job.op != (op{kind: opHold, weight: 50}) {
		t.Fatalf("after SetWeight(50) the driver is for %s, want a new one for weight 50%%", d.Job.op)
	}
	open()
	<-old.Done()
	if !errors.Is(errOf(old), context.Canceled) {
		t.Errorf("the old driver ended with %v, want it stopped (context.Canceled)", errOf(old))
	}
	<-d.Done()
	if errOf(d) != nil || final(d).Phase != rollout.PhaseHolding {
		t.Errorf("the new driver ended %s, %v; want %s", final(d).Phase, errOf(d), rollout.PhaseHolding)
	}
	if n := driverCount(p); n != 1 {
		t.Errorf("%d drivers, want 1", n)
	}
}

// A rollback cut short (the abort's driver gone before it ended) is finished by the next driver
// of the Rollout before it rolls anything out: here the template went back to the stable images
// after the abort, and Argo sends full promotion of those.
func TestCutRollbackFinishes(t *testing.T) {
	client := pt.NewClient(t, 4)
	pt.PlayKubelet(t, client)
	p := newPlugin(t, client)
	tp := serve(t, p)
	reconcile(t, tp, argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2), hashV2, hashV1, 50)
	<-driverOf(t, p).Done()
	if got := onImage(t, client, pt.ImageV2); got != 2 {
		t.Fatalf("at weight 50, %d pods run %s, want 2", got, pt.ImageV2)
	}
	// One step of a rollback, as an abort's driver cut short leaves it: the lock says RollingBack.
	req, err := p.decode(argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2))
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := (&rollout.Engine{Client: client}).Abort(context.Background(), req.Spec.Rollback(), rollout.Status{})
	if err != nil || st.Phase != rollout.PhaseRollingBack {
		t.Fatalf("one rollback step = %s, %v; want %s", st.Phase, err, rollout.PhaseRollingBack)
	}

	reverted := argoRollout(goodConfig, pt.ImageV1, hashV1, hashV1)
	reconcile(t, tp, reverted, hashV1, hashV1, 0)
	d := driverOf(t, p)
	<-d.Done()
	if v, err := reconcile(t, tp, reverted, hashV1, hashV1, 0); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(0) = %v, RpcError %q; want Verified (driver: %+v, %v)", v, err.ErrorString, final(d), errOf(d))
	}
	if got := onImage(t, client, pt.ImageV2); got != 0 {
		t.Errorf("%d pods still run %s: %v", got, pt.ImageV2, pt.PodImages(t, client))
	}
	if got := pt.TemplateImage(t, client); got != pt.ImageV1 {
		t.Errorf("the template runs %s, want %s", got, pt.ImageV1)
	}
}

// The calls of one reconcile (UpdateHash, SetWeight, VerifyWeight) of a Healthy Rollout whose
// 100-pod target settled: Argo makes them on every reconcile, forever.
func BenchmarkReconcileSettled(b *testing.B) {
	client := pt.NewClient(b, 100)
	pt.PlayKubelet(b, client)
	p := newPlugin(b, client)
	tp := serve(b, p)
	ro := argoRollout(`{"target":{"kind":"StatefulSet","name":"web"},"maxUnavailable":"100%"}`, pt.ImageV2, hashV2, hashV2)
	reconcile(b, tp, ro, hashV2, hashV2, 0)
	<-driverOf(b, p).Done()
	client.ClearActions()
	for b.Loop() {
		if v, err := reconcile(b, tp, ro, hashV2, hashV2, 0); err.HasError() || v != types.Verified {
			b.Fatalf("VerifyWeight = %v, RpcError %q; want Verified", v, err.ErrorString)
		}
	}
	b.ReportMetric(float64(len(client.Actions()))/float64(b.N), "API-calls/op")
}

// SetWeight of a new weight on a 100-pod target: it starts the driver and returns.
func BenchmarkSetWeightStarts(b *testing.B) {
	client := pt.NewClient(b, 100)
	p := newPlugin(b, client)
	tp := serve(b, p)
	ro := argoRollout(goodConfig, pt.ImageV2, hashV1, hashV2)
	if err := tp.UpdateHash(ro, hashV2, hashV1, nil); err.HasError() {
		b.Fatal(err.ErrorString)
	}
	weight := int32(1)
	for b.Loop() {
		// Every call asks for another weight, so every call starts a driver.
		if err := tp.SetWeight(ro, weight, nil); err.HasError() {
			b.Fatal(err.ErrorString)
		}
		weight = weight%99 + 1
	}
}

// inconclusive plays Prometheus: every analysis query has no result (Inconclusive) while on is
// set, and passes otherwise; the reachability check always answers.
type inconclusive struct{ on atomic.Bool }

func (q *inconclusive) Query(_ context.Context, query string) (float64, bool, error) {
	if query == "vector(1)" || !q.on.Load() {
		return 1, true, nil
	}
	return 0, false, nil
}

// A weight paused on an inconclusive analysis stays paused while Argo repeats it, VerifyWeight
// naming the way on; a higher weight (the Rollout promoted past the step) accepts the batch and
// goes on.
func TestPromotedPastPause(t *testing.T) {
	client := pt.NewClient(t, 10)
	pt.PlayKubelet(t, client)
	q := &inconclusive{}
	q.on.Store(true)
	p := newPluginOf(t, &rollout.Driver{Engine: &rollout.Engine{Client: client, Querier: q}})
	tp := serve(t, p)
	config := `{"target":{"kind":"StatefulSet","name":"web"},"maxUnavailable":"100%","analysis":{"prometheus":{"address":"http://prom.example:9090"},` +
		`"count":1,"initialDelay":"0s","consecutiveErrorLimit":0,"checks":{"errorRate":{"disabled":true},"latency":{"disabled":true},` +
		`"traffic":{"disabled":true},"saturation":{"disabled":true},"custom":[{"name":"up","query":"min(up)","condition":"result > 0"}]}}}`
	ro := argoRollout(config, pt.ImageV2, hashV1, hashV2)
	reconcile(t, tp, ro, hashV2, hashV1, 20)
	paused := driverOf(t, p)
	<-paused.Done()
	if final(paused).Phase != rollout.PhasePaused {
		t.Fatalf("weight 20 ended %s (%v), want %s", final(paused).Phase, errOf(paused), rollout.PhasePaused)
	}
	for range 2 {
		v, err := reconcile(t, tp, ro, hashV2, hashV1, 20)
		if v != types.NotVerified || !strings.Contains(err.ErrorString, "paused") || !strings.Contains(err.ErrorString, "kubectl argo rollouts promote") {
			t.Errorf("VerifyWeight(20) while paused = %v, RpcError %q; want NotVerified, naming the pause and promote", v, err.ErrorString)
		}
	}
	if driverOf(t, p) != paused {
		t.Error("a repeated SetWeight(20) replaced the paused driver")
	}
	if got := onImage(t, client, pt.ImageV2); got != 2 {
		t.Errorf("paused at weight 20, %d pods run %s, want 2", got, pt.ImageV2)
	}

	q.on.Store(false)
	reconcile(t, tp, ro, hashV2, hashV1, 50)
	d := driverOf(t, p)
	<-d.Done()
	if v, err := tp.VerifyWeight(ro, 50, nil); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(50) after the promotion = %v, RpcError %q; want Verified (driver: %+v, %v)", v, err.ErrorString, final(d), errOf(d))
	}
	if got := onImage(t, client, pt.ImageV2); got != 5 {
		t.Errorf("at weight 50, %d pods run %s, want 5", got, pt.ImageV2)
	}
}

// final is the status a finished driver ended with.
func final(d *driver) rollout.Status {
	st, _ := d.Result()
	return st
}

// errOf is the error a finished driver ended with.
func errOf(d *driver) error {
	_, err := d.Result()
	return err
}
