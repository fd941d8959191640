package rollout_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestTakeOverFromAGoneHolder: a rollout another driver left holding the StatefulSet (here an
// Argo Rollout's, which no longer exists) is refused to every command, which names the holder
// and --take-over; rollback --take-over then takes it over and puts its pod back, the same pod.
func TestTakeOverFromAGoneHolder(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	one := intstr.FromInt32(1)
	spec := rollout.Spec{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"},
		Images: map[string]string{"app": appV2}, UpTo: &one, MaxUnavailable: one, Timeout: v1alpha1.DefaultTimeout,
		Holder: "argo:" + ns + "/gone", HolderUID: "0b9e7c1e-0000-4000-8000-000000000001", PinDigests: rollout.PinNever}
	st, err := (&rollout.Driver{Engine: &rollout.Engine{Client: env.Client}}).Drive(context.Background(), spec, nil)
	if err != nil || st.Phase != rollout.PhaseHolding {
		t.Fatalf("the gone Rollout's rollout = %+v, %v; want Holding", st, err)
	}
	target := []string{"-n", ns, "--target", "statefulset/web"}
	for _, args := range [][]string{
		append([]string{"rollback"}, target...),
		append([]string{"run", "--supersede", "--image", "app=" + appV3}, target...),
	} {
		r := runCLI(t, args...)
		if r.Code != 2 || !contains(r.Stderr, "argo:"+ns+"/gone") || !contains(r.Stderr, "pass --take-over") {
			t.Errorf("%v: %s; want exit 2 naming the holder and --take-over", args, r)
		}
	}
	if l := lockOf(t, ns); l.Holder != spec.Holder || l.Phase != rollout.PhaseHolding {
		t.Fatalf("lock %+v after the refusals, want it as the gone Rollout left it", l)
	}
	if r := runCLI(t, append([]string{"rollback", "--take-over"}, target...)...); r.Code != 0 {
		t.Fatalf("rollback --take-over: %s; want exit 0", r)
	}
	if l := lockOf(t, ns); l.Holder != "cli" || l.Phase != rollout.PhaseRolledBack {
		t.Errorf("lock %+v, want RolledBack by cli", l)
	}
	after := identities(t, ns, "app=web")
	for name, id := range before {
		if after[name].uid != id.uid || after[name].imageIDs["app"] != id.imageIDs["app"] {
			t.Errorf("pod %s: UID %s on %s, want %s on %s", name, after[name].uid, after[name].imageIDs["app"], id.uid, id.imageIDs["app"])
		}
	}
	waitStatefulSet(t, ns, "web", "template and strategy restored", func(s *appsv1.StatefulSet) bool {
		return equality.Semantic.DeepEqual(s.Spec.Template, orig.Spec.Template) && equality.Semantic.DeepEqual(s.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
	})
}

func lockOf(t *testing.T, ns string) *rollout.Record {
	t.Helper()
	l, err := rollout.ReadRecord(context.Background(), env.Client, workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"})
	if err != nil || l == nil {
		t.Fatalf("reading the lock of StatefulSet %s/web: %v, %v", ns, l, err)
	}
	return l
}
