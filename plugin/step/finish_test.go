package step

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"

	"github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

// withField is goodConfig with one more field, given as JSON.
func withField(config, field string) string {
	return strings.TrimSuffix(config, "}") + "," + field + "}"
}

// stsOf reads the test's StatefulSet.
func stsOf(t *testing.T, client *fake.Clientset) *appsv1.StatefulSet {
	t.Helper()
	sts, err := client.AppsV1().StatefulSets(testNS).Get(context.Background(), stsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// lockOf reads the test's StatefulSet's rollout lock, or nil.
func lockOf(t *testing.T, client *fake.Clientset) *rollout.Record {
	t.Helper()
	raw, ok := stsOf(t, client).Annotations[workload.LockAnnotation]
	if !ok {
		return nil
	}
	var l rollout.Record
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

// podsOn is each pod's image and restart count, by name.
func podsOn(t *testing.T, client *fake.Clientset) map[string]string {
	t.Helper()
	pods, err := client.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Spec.Containers[0].Image
	}
	return out
}

// runToEnd calls Run with config and waits for its driver, then calls Run again as Argo does on
// its requeue, and returns that answer.
func runToEnd(t *testing.T, p *Plugin, ro *argov1alpha1.Rollout, config string) types.RpcStepResult {
	t.Helper()
	sp := serve(t, p)
	res, rpcErr := sp.Run(ro, stepContext(config, nil))
	if rpcErr.HasError() {
		t.Fatalf("Run: RpcError %q", rpcErr.ErrorString)
	}
	<-driverOf(t, p).Done()
	res, rpcErr = sp.Run(ro, stepContext(config, res.Status))
	if rpcErr.HasError() {
		t.Fatalf("Run after the driver ended: RpcError %q", rpcErr.ErrorString)
	}
	return res
}

// Terminate promotes the rollout to every pod, in place, and answers Successful or Failed, never
// Running; pods that cannot finish their update within TerminateWait do not hold the call.
func TestTerminate(t *testing.T) {
	held := withField(goodConfig, `"upTo":1`)
	tests := []struct {
		name string
		// setup brings the cluster to what Terminate meets.
		setup   func(t *testing.T, p *Plugin, client *fake.Clientset)
		kubelet bool
		phase   types.StepPhase
		message string
		lock    rollout.Phase // the lock's phase after, "" for none
	}{
		{name: "held part way", kubelet: true, phase: types.PhaseSuccessful, message: "promoted: the remaining pods of StatefulSet shop/web are updated in place", lock: rollout.PhaseSucceeded,
			setup: func(t *testing.T, p *Plugin, _ *fake.Clientset) {
				if res := runToEnd(t, p, argoRollout("65f9bfd99b"), held); res.Phase != types.PhaseSuccessful {
					t.Fatalf("Run = %s %q, want Successful at the hold", res.Phase, res.Message)
				}
			}},
		{name: "nothing rolled out", kubelet: true, phase: types.PhaseSuccessful, message: "nothing to promote",
			setup: func(*testing.T, *Plugin, *fake.Clientset) {}},
		{name: "rolling back", kubelet: true, phase: types.PhaseFailed, message: "is rolling back", lock: rollout.PhaseRollingBack,
			setup: func(t *testing.T, p *Plugin, client *fake.Clientset) {
				runToEnd(t, p, argoRollout("65f9bfd99b"), held)
				req, err := decode(argoRollout("65f9bfd99b"), stepContext(held, nil))
				if err != nil {
					t.Fatal(err)
				}
				// An Abort cut short after its first step.
				if _, _, err := (&rollout.Engine{Client: client}).Abort(context.Background(), req.Spec.Rollback(), rollout.Status{}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "pods that never finish", kubelet: false, phase: types.PhaseSuccessful, message: "promoted: the remaining pods of StatefulSet shop/web are updated in place, 0 of 2 so far", lock: rollout.PhaseProgressing,
			setup: func(t *testing.T, p *Plugin, client *fake.Clientset) {
				if res, rpcErr := serve(t, p).Run(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil)); rpcErr.HasError() || res.Phase != types.PhaseRunning {
					t.Fatalf("Run = %s, RpcError %q; want Running", res.Phase, rpcErr.ErrorString)
				}
				d := driverOf(t, p)
				for d.Status().Updating == 0 && !d.Finished() {
					time.Sleep(time.Millisecond)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, 2)
			if tt.kubelet {
				playKubelet(t, client)
			}
			p := newPluginWith(t, Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}}}, Options{TerminateWait: 50 * time.Millisecond})
			tt.setup(t, p, client)
			res, rpcErr := serve(t, p).Terminate(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
			if rpcErr.HasError() || res.Phase != tt.phase || !strings.Contains(res.Message, tt.message) {
				t.Fatalf("Terminate = %s %q, RpcError %q; want %s with %q", res.Phase, res.Message, rpcErr.ErrorString, tt.phase, tt.message)
			}
			if tt.kubelet {
				// The promotion goes on after the call; its end is what the lock says.
				p.drivers.Get(testKey).Wait()
			}
			l := lockOf(t, client)
			switch {
			case tt.lock == "" && l != nil:
				t.Errorf("lock %+v, want none", l)
			case tt.lock != "" && (l == nil || l.Phase != tt.lock):
				t.Errorf("lock %+v, want phase %s", l, tt.lock)
			}
			if tt.lock == rollout.PhaseSucceeded {
				sts := stsOf(t, client)
				if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || sts.Spec.Template.Spec.Containers[0].Image != imageV2 {
					t.Errorf("StatefulSet strategy %s, template %s; want RollingUpdate back and %s", sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.Containers[0].Image, imageV2)
				}
				if got := podsOn(t, client); got["web-1"] != imageV2 || got["web-0"] != imageV2 {
					t.Errorf("pods run %v, want both on %s, the template's images", got, imageV2)
				}
			}
		})
	}
}

// scanRollout is the test's Rollout as the API server has it, with our step (or traffic router)
// config.
func scanRollout(name string, steps []argov1alpha1.CanaryStep, traffic string) *argov1alpha1.Rollout {
	ro := &argov1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}}
	ro.Status.StableRS = "65f9bfd99b"
	ro.Spec.Strategy.Canary = &argov1alpha1.CanaryStrategy{Steps: steps}
	if traffic != "" {
		ro.Spec.Strategy.Canary.TrafficRouting = &argov1alpha1.RolloutTrafficRouting{Plugins: map[string]json.RawMessage{"inplace-rollout/traffic": json.RawMessage(traffic)}}
	}
	return ro
}

func pluginStep(name, config string) argov1alpha1.CanaryStep {
	return argov1alpha1.CanaryStep{Plugin: &argov1alpha1.PluginStep{Name: name, Config: json.RawMessage(config)}}
}

// cutShort rolls the test's StatefulSet out for holder's Rollout and starts its rollback, one
// step, as an Abort killed after its first write leaves it.
func cutShort(t *testing.T, client *fake.Clientset, holderRollout string) {
	t.Helper()
	ro := argoRollout("65f9bfd99b")
	ro.Name = holderRollout
	req, err := decode(ro, stepContext(goodConfig, nil))
	if err != nil {
		t.Fatal(err)
	}
	e := &rollout.Driver{Engine: &rollout.Engine{Client: client}}
	if st, err := e.Drive(context.Background(), req.Spec, nil); err != nil || st.Phase != rollout.PhaseSucceeded {
		t.Fatalf("rollout = %+v, %v; want Succeeded", st, err)
	}
	if _, _, err := e.Abort(context.Background(), req.Spec.Rollback(), rollout.Status{}); err != nil {
		t.Fatal(err)
	}
	if l := lockOf(t, client); l.Phase != rollout.PhaseRollingBack {
		t.Fatalf("lock %s, want RollingBack", l.Phase)
	}
}

// The scan finishes a rollback cut short for a Rollout with our step whose target's lock rolls
// back for that Rollout, and only then.
func TestScan(t *testing.T) {
	tests := []struct {
		name    string
		ro      *argov1alpha1.Rollout
		holder  string // the Rollout whose rollback is cut short; "" for none
		started int
	}{
		{"our step, rolling back for it", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, goodConfig)}, ""), "shop-web", 1},
		{"two steps on one target", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, withField(goodConfig, `"upTo":1`)), {Pause: &argov1alpha1.RolloutPause{}}, pluginStep(Name, goodConfig)}, ""), "shop-web", 1},
		// The traffic router finishes its own rollbacks, on Argo's calls of every reconcile.
		{"our traffic router", scanRollout("shop-web", nil, goodConfig), "shop-web", 0},
		{"rolling back for another Rollout", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, goodConfig)}, ""), "shop-other", 0},
		{"not rolling back", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, goodConfig)}, ""), "", 0},
		{"another plugin's step", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep("other/step", goodConfig)}, ""), "shop-web", 0},
		{"a config that does not decode", scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, `{"batchez":1}`)}, ""), "shop-web", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, 2)
			playKubelet(t, client)
			if tt.holder != "" {
				cutShort(t, client, tt.holder)
			}
			// shop-other exists: its rollouts are its own (the deleted Rollouts' are TestScanOrphans').
			clients := Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}}, Rollouts: argofake.NewSimpleClientset(tt.ro, scanRollout("shop-other", nil, ""))}
			p := newPluginWith(t, clients, Options{})
			if got := p.scan(context.Background(), clients); got != tt.started {
				t.Fatalf("scan started %d rollbacks, want %d", got, tt.started)
			}
			if tt.started == 0 {
				if l := lockOf(t, client); tt.holder != "" && l.Phase != rollout.PhaseRollingBack {
					t.Errorf("lock %s, want the rollback left alone", l.Phase)
				}
				return
			}
			d := driverOf(t, p)
			if st, err := d.Wait(); err != nil || st.Phase != rollout.PhaseRolledBack {
				t.Fatalf("rollback driver ended %+v, %v; want RolledBack", st, err)
			}
			if again := p.scan(context.Background(), clients); again != 0 {
				t.Errorf("a second scan started %d rollbacks, want none", again)
			}
			for name, image := range podsOn(t, client) {
				if image != imageV1 && image != plugintest.ImageIDOf(imageV1) {
					t.Errorf("pod %s on %s, want %s back", name, image, imageV1)
				}
			}
		})
	}
}

// The scan runs when the plugin starts and on each tick; an Abort meanwhile joins its rollback
// rather than start a second one.
func TestScanLoop(t *testing.T) {
	client := newClient(t, 2)
	ticks := make(chan time.Time)
	scans := make(chan int)
	clients := Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}},
		Rollouts: argofake.NewSimpleClientset(scanRollout("shop-web", []argov1alpha1.CanaryStep{pluginStep(Name, goodConfig)}, ""))}
	p := newPluginWith(t, clients, Options{Ticks: ticks})
	p.afterScan = func(n int) { scans <- n }
	sp := serve(t, p)
	if err := sp.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %s", err.ErrorString)
	}
	if n := <-scans; n != 0 {
		t.Fatalf("the first scan started %d rollbacks, want none", n)
	}
	playKubelet(t, client)
	cutShort(t, client, "shop-web")
	ticks <- time.Now()
	if n := <-scans; n != 1 {
		t.Fatalf("the scan after a tick started %d rollbacks, want 1", n)
	}
	d := driverOf(t, p)
	res, rpcErr := sp.Abort(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Abort = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	if !d.Finished() {
		t.Error("Abort returned while the scan's rollback still ran")
	}
	if l := lockOf(t, client); l.Phase != rollout.PhaseRolledBack {
		t.Errorf("lock %s, want RolledBack", l.Phase)
	}
}

// Abort arriving while a rollback of the target is under way joins it: one driver.
func TestAbortJoinsRollback(t *testing.T) {
	client := newClient(t, 2)
	playKubelet(t, client)
	cutShort(t, client, "shop-web")
	p := newPlugin(t, newClient(t, 0), 0)
	e := &rollout.Driver{Engine: &rollout.Engine{Client: client}}
	req, err := decode(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	first, _ := p.start(req, driveRollback, "", nil, func(ctx context.Context, d *driver) (rollout.Status, error) {
		<-block
		return e.DriveAbort(ctx, req.Spec.Rollback(), d.OnStatus)
	})
	if got := p.rollbackFor(e, req); got != first {
		t.Error("a second rollback started while one was under way")
	}
	if p.finishRollback(e, req) {
		t.Error("the scan started a rollback while one was under way")
	}
	close(block)
	if st, err := first.Wait(); st.Phase != rollout.PhaseRolledBack {
		t.Errorf("rollback ended %+v, %v; want RolledBack", st, err)
	}
}

// A Rollout fully promoted while its target is still held for it (promote --full at a pause
// between two upTo steps: no step Running, so no Terminate) gets its rollout promoted to every
// pod by the scan, in place; one still on its way keeps the hold.
func TestScanPromotesAfterFullPromotion(t *testing.T) {
	tests := []struct {
		name     string
		promoted bool
		want     rollout.Phase // the lock's phase after the scan
	}{
		{"fully promoted", true, rollout.PhaseSucceeded},
		{"between two steps", false, rollout.PhaseHolding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, 3)
			playKubelet(t, client)
			held := withField(goodConfig, `"upTo":1`)
			ro := scanRollout("web", []argov1alpha1.CanaryStep{pluginStep(Name, held), {Pause: &argov1alpha1.RolloutPause{}}, pluginStep(Name, goodConfig)}, "")
			req, err := decode(ro, stepContext(held, nil))
			if err != nil {
				t.Fatal(err)
			}
			if st, err := (&rollout.Driver{Engine: &rollout.Engine{Client: client}}).Drive(context.Background(), req.Spec, nil); err != nil || st.Phase != rollout.PhaseHolding {
				t.Fatalf("rollout = %+v, %v; want Holding", st, err)
			}
			ro.Status.CurrentPodHash = "85c5855485"
			if tt.promoted {
				ro.Status.StableRS = ro.Status.CurrentPodHash
			}
			clients := Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}}, Rollouts: argofake.NewSimpleClientset(ro)}
			p := newPluginWith(t, clients, Options{})
			started := p.scan(context.Background(), clients)
			if tt.promoted {
				if started != 1 {
					t.Fatalf("scan started %d drivers, want the promotion", started)
				}
				d := p.drivers.Get(req.key)
				if d == nil || d.Job.kind != drivePromote {
					t.Fatalf("driver of %v: %+v, want a promotion", req.key, d)
				}
				if st, err := d.Wait(); err != nil || st.Phase != rollout.PhaseSucceeded {
					t.Fatalf("promotion driver ended %+v, %v; want Succeeded", st, err)
				}
			} else if started != 0 {
				t.Fatalf("scan started %d drivers, want none", started)
			}
			if l := lockOf(t, client); l.Phase != tt.want {
				t.Errorf("lock %s, want %s", l.Phase, tt.want)
			}
			if got := stsOf(t, client).Spec.UpdateStrategy.Type; tt.promoted && got != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("StatefulSet update strategy %s after the promotion, want its RollingUpdate back", got)
			}
			for name, image := range podsOn(t, client) {
				if tt.promoted && image != imageV2 {
					t.Errorf("pod %s on %s after the promotion, want %s", name, image, imageV2)
				}
			}
		})
	}
}

// An aborted Rollout whose Abort call ended before its rollback wrote anything leaves its
// rollout active; the scan rolls it back, and leaves a Rollout that was not aborted alone.
func TestScanRollsBackAnAbortCutBeforeItsRollback(t *testing.T) {
	for _, aborted := range []bool{true, false} {
		t.Run(map[bool]string{true: "aborted", false: "not aborted"}[aborted], func(t *testing.T) {
			client := newClient(t, 2)
			playKubelet(t, client)
			ro := argoRollout("65f9bfd99b")
			req, err := decode(ro, stepContext(withField(goodConfig, `"upTo":1`), nil))
			if err != nil {
				t.Fatal(err)
			}
			if st, err := (&rollout.Driver{Engine: &rollout.Engine{Client: client}}).Drive(context.Background(), req.Spec, nil); err != nil || st.Phase != rollout.PhaseHolding {
				t.Fatalf("rollout = %+v, %v; want Holding", st, err)
			}
			listed := scanRollout(ro.Name, []argov1alpha1.CanaryStep{pluginStep(Name, withField(goodConfig, `"upTo":1`))}, "")
			listed.Status.Abort = aborted
			clients := Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client}}, Rollouts: argofake.NewSimpleClientset(listed)}
			p := newPluginWith(t, clients, Options{})
			want := map[bool]int{true: 1, false: 0}[aborted]
			if got := p.scan(context.Background(), clients); got != want {
				t.Fatalf("scan started %d rollbacks, want %d", got, want)
			}
			if !aborted {
				if l := lockOf(t, client); l.Phase != rollout.PhaseHolding {
					t.Errorf("lock %s, want the rollout left Holding", l.Phase)
				}
				return
			}
			d := driverOf(t, p)
			if st, err := d.Wait(); err != nil || st.Phase != rollout.PhaseRolledBack {
				t.Fatalf("rollback driver ended %+v, %v; want RolledBack", st, err)
			}
		})
	}
}
