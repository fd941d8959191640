package step

import (
	"context"
	"slices"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

func TestOrphans(t *testing.T) {
	held := func(name, holder, uid string, phase rollout.Phase) rollout.Record {
		return rollout.Record{Target: rollout.Ref{Kind: rollout.StatefulSet, Namespace: "shop", Name: name},
			Holder: holder, HolderUID: k8stypes.UID(uid), Phase: phase}
	}
	recs := []rollout.Record{
		held("a", "argo:shop/web", "u1", rollout.PhaseProgressing), // its Rollout exists
		held("b", "argo:shop/gone", "u2", rollout.PhaseHolding),    // no Rollout of that name
		held("c", "argo:shop/again", "u3", rollout.PhasePaused),    // the name's Rollout is another object
		held("d", "argo:shop/old", "", rollout.PhaseRollingBack),   // no UID recorded, Rollout exists
		held("e", "argo:shop/gone", "u2", rollout.PhaseSucceeded),  // finished: nothing holds it
	}
	rollouts := map[string]k8stypes.UID{"argo:shop/web": "u1", "argo:shop/again": "u9", "argo:shop/old": "u4"}
	var got []string
	for _, rec := range orphans(recs, rollouts) {
		got = append(got, rec.Target.Name)
	}
	if want := []string{"b", "c"}; !slices.Equal(got, want) {
		t.Errorf("orphans = %v, want %v", got, want)
	}
}

func TestDecidePromote(t *testing.T) {
	req, err := decode(argoRollout("65f9bfd99b"), stepContext(goodConfig, nil))
	if err != nil {
		t.Fatal(err)
	}
	hash := req.Spec.Hash()
	lock := func(phase rollout.Phase, holder, uid, hash string) *rollout.Record {
		return &rollout.Record{Holder: holder, HolderUID: k8stypes.UID(uid), Phase: phase, SpecHash: hash, RolloutID: "r1"}
	}
	tests := []struct {
		name string
		lock *rollout.Record
		want promoteAction
	}{
		{"no lock", nil, promoteNone},
		{"held part way", lock(rollout.PhaseHolding, req.Holder, "u1", hash), promoteDrive},
		{"progressing", lock(rollout.PhaseProgressing, req.Holder, "u1", hash), promoteDrive},
		{"paused", lock(rollout.PhasePaused, req.Holder, "u1", hash), promoteDrive},
		{"lock without a UID", lock(rollout.PhaseHolding, req.Holder, "", hash), promoteDrive},
		{"another holder", lock(rollout.PhaseHolding, "argo:shop/other", "u1", hash), promoteNone},
		{"a deleted Rollout of the same name", lock(rollout.PhaseHolding, req.Holder, "u0", hash), promoteNone},
		{"other images", lock(rollout.PhaseHolding, req.Holder, "u1", "0123456789abcdef"), promoteNone},
		{"rolling back", lock(rollout.PhaseRollingBack, req.Holder, "u1", hash), promoteRefuse},
		{"succeeded", lock(rollout.PhaseSucceeded, req.Holder, "u1", hash), promoteNone},
		{"rolled back", lock(rollout.PhaseRolledBack, req.Holder, "u1", hash), promoteNone},
		{"halted", lock(rollout.PhaseHalted, req.Holder, "u1", hash), promoteNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, msg := decidePromote(tt.lock, req, "u1"); got != tt.want || got != promoteDrive && msg == "" {
				t.Errorf("decidePromote = %v %q, want %v with a reason", got, msg, tt.want)
			}
		})
	}
}

// TestScanOrphans: the rollout of a Rollout that was deleted (none of its name, or one of another
// UID) is rolled back by the scan, its rollout driver replaced; a live Rollout's is left alone.
func TestScanOrphans(t *testing.T) {
	tests := []struct {
		name     string
		rollouts []*argov1alpha1.Rollout
		started  int
	}{
		{"the Rollout exists", []*argov1alpha1.Rollout{withUID(argoRollout("65f9bfd99b"), "u1")}, 0},
		{"no Rollout of its name", nil, 1},
		{"created again under its name", []*argov1alpha1.Rollout{withUID(argoRollout(""), "u2")}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, 3)
			playKubelet(t, client)
			ro := withUID(argoRollout("65f9bfd99b"), "u1")
			held := withField(goodConfig, `"upTo":1`)
			req, err := decode(ro, stepContext(held, nil))
			if err != nil {
				t.Fatal(err)
			}
			e := &rollout.Driver{Engine: &rollout.Engine{Client: client}}
			if st, err := e.Drive(context.Background(), req.Spec, nil); err != nil || st.Phase != rollout.PhaseHolding {
				t.Fatalf("rollout = %+v, %v; want Holding", st, err)
			}
			var objs []*argov1alpha1.Rollout
			objs = append(objs, tt.rollouts...)
			argo := argofake.NewSimpleClientset()
			for _, o := range objs {
				if _, err := argo.ArgoprojV1alpha1().Rollouts(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			clients := Clients{Driver: e, Rollouts: argo}
			p := newPluginWith(t, clients, Options{})
			// The deleted Rollout's driver, holding where it is.
			live, _ := p.start(req, driveRollout, req.Canonical, nil, func(ctx context.Context, d *driver) (rollout.Status, error) {
				<-ctx.Done()
				return rollout.Status{}, ctx.Err()
			})
			if got := p.scan(context.Background(), clients); got != tt.started {
				t.Fatalf("scan started %d drivers, want %d", got, tt.started)
			}
			if tt.started == 0 {
				if live.Finished() {
					t.Error("the live Rollout's driver was stopped")
				}
				if l := lockOf(t, client); l.Phase != rollout.PhaseHolding {
					t.Errorf("lock %s, want Holding", l.Phase)
				}
				return
			}
			<-live.Done()
			d := driverOf(t, p)
			if d.Job.kind != driveRollback {
				t.Fatalf("driver %s, want a rollback", d.Job.kind)
			}
			if st, err := d.Wait(); err != nil || st.Phase != rollout.PhaseRolledBack {
				t.Fatalf("rollback ended %+v, %v; want RolledBack", st, err)
			}
			for name, image := range podsOn(t, client) {
				if image != imageV1 && image != plugintest.ImageIDOf(imageV1) {
					t.Errorf("pod %s on %s, want %s back", name, image, imageV1)
				}
			}
			if got := stsOf(t, client).Spec.UpdateStrategy.Type; got != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("StatefulSet update strategy %s after the rollback, want its RollingUpdate back", got)
			}
			if again := p.scan(context.Background(), clients); again != 0 {
				t.Errorf("a second scan started %d drivers, want none", again)
			}
		})
	}
}

func withUID(ro *argov1alpha1.Rollout, uid string) *argov1alpha1.Rollout {
	ro.UID = k8stypes.UID(uid)
	return ro
}

// TestRunAfterAnEarlierRolloutOfTheSameName: a Rollout created again under the name of one
// deleted mid-rollout finds its target held by the deleted one's rollout: Run rolls that rollout
// back first and answers Running meanwhile, then rolls out its own images; it never fails for it.
func TestRunAfterAnEarlierRolloutOfTheSameName(t *testing.T) {
	client := newClient(t, 3)
	playKubelet(t, client)
	e := &rollout.Driver{Engine: &rollout.Engine{Client: client}}
	gone := withUID(argoRollout("65f9bfd99b"), "u1")
	held, err := decode(gone, stepContext(withField(goodConfig, `"upTo":1`), nil))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.Drive(context.Background(), held.Spec, nil); err != nil || st.Phase != rollout.PhaseHolding {
		t.Fatalf("the deleted Rollout's rollout = %+v, %v; want Holding", st, err)
	}
	p := newPluginWith(t, Clients{Driver: e}, Options{})
	sp := serve(t, p)
	again := withUID(argoRollout("65f9bfd99b"), "u2")
	res, rpcErr := sp.Run(again, stepContext(goodConfig, nil))
	for i := 0; !rpcErr.HasError() && res.Phase == types.PhaseRunning && !strings.Contains(res.Message, "deleted since") && i < 100; i++ {
		<-driverOf(t, p).Done()
		res, rpcErr = sp.Run(again, stepContext(goodConfig, res.Status))
	}
	if rpcErr.HasError() || res.Phase != types.PhaseRunning || !strings.Contains(res.Message, "an earlier Rollout shop/shop-web, deleted since") {
		t.Fatalf("Run = %s %q, RpcError %q; want Running while the earlier rollout rolls back", res.Phase, res.Message, rpcErr.ErrorString)
	}
	if d := driverOf(t, p); d.Job.kind != driveRollback {
		t.Fatalf("driver %s, want the rollback of the earlier rollout", d.Job.kind)
	}
	for i := 0; !rpcErr.HasError() && res.Phase == types.PhaseRunning && i < 100; i++ {
		<-driverOf(t, p).Done()
		res, rpcErr = sp.Run(again, stepContext(goodConfig, res.Status))
	}
	if rpcErr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run = %s %q, RpcError %q; want Successful", res.Phase, res.Message, rpcErr.ErrorString)
	}
	if l := lockOf(t, client); l.HolderUID != "u2" || l.Phase != rollout.PhaseSucceeded {
		t.Errorf("lock %+v, want Succeeded for the Rollout of UID u2", l)
	}
	for name, image := range podsOn(t, client) {
		if image != imageV2 {
			t.Errorf("pod %s on %s, want %s", name, image, imageV2)
		}
	}
}
