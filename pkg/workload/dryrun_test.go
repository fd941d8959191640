package workload

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestDryRunSendsEveryWriteAsADryRun: a workload DryRun marked sends its start (the freeze, the
// pause, the lock ConfigMap) with dryRun All, and the same write as without it.
func TestDryRunSendsEveryWriteAsADryRun(t *testing.T) {
	pods := func() []runtime.Object {
		return []runtime.Object{runningPod("web-0", "reg/app:v1", map[string]string{"app": "web"}, nil)}
	}
	for _, tc := range []struct {
		name    string
		objects func() []runtime.Object
		ref     Ref
	}{
		{"StatefulSet", func() []runtime.Object { return []runtime.Object{newStatefulSet()} }, Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}},
		{"DaemonSet", func() []runtime.Object { return append(dsRevisions(), newDaemonSet()) }, Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}},
		{"Deployment", func() []runtime.Object {
			return []runtime.Object{newDeployment(), newReplicaSet("new", 1, "reg/app:v1", "dep-uid")}
		}, Ref{Kind: Deployment, Namespace: "ns", Name: "api"}},
		{"Pods", pods, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images := Images(map[string]string{"app": "reg/app:v2"})
			writes := func(dryRun bool) []clienttesting.Action {
				client := fake.NewClientset(tc.objects()...)
				w := mustLoad(t, client, tc.ref)
				if dryRun {
					w = DryRun(w)
				}
				client.ClearActions()
				if err := w.Start(context.Background(), `{"rolloutID":"r1"}`, images); err != nil {
					t.Fatal(err)
				}
				return client.Actions()
			}
			real, dry := writes(false), writes(true)
			if len(dry) != 1 || len(real) != 1 {
				t.Fatalf("writes: %d dry, %d real; want one each", len(dry), len(real))
			}
			switch a := dry[0].(type) {
			case clienttesting.PatchActionImpl:
				r := real[0].(clienttesting.PatchActionImpl)
				if !slices.Equal(a.PatchOptions.DryRun, []string{metav1.DryRunAll}) || r.PatchOptions.DryRun != nil {
					t.Errorf("dryRun: %v dry, %v real", a.PatchOptions.DryRun, r.PatchOptions.DryRun)
				}
				if string(a.Patch) != string(r.Patch) || a.PatchType != r.PatchType || a.Name != r.Name {
					t.Errorf("dry run sends %s %s, the write %s %s", a.PatchType, a.Patch, r.PatchType, r.Patch)
				}
			case clienttesting.CreateActionImpl:
				r := real[0].(clienttesting.CreateActionImpl)
				if !slices.Equal(a.CreateOptions.DryRun, []string{metav1.DryRunAll}) || r.CreateOptions.DryRun != nil {
					t.Errorf("dryRun: %v dry, %v real", a.CreateOptions.DryRun, r.CreateOptions.DryRun)
				}
				if a.Object.(*corev1.ConfigMap).Name != r.Object.(*corev1.ConfigMap).Name {
					t.Errorf("dry run creates %v, the write %v", a.Object, r.Object)
				}
			default:
				t.Fatalf("unexpected write %#v", a)
			}
		})
	}
}
