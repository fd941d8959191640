package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// dryRunCluster is planStatefulSet's StatefulSet of n pods on v1, each container running, and
// a client whose pod patches pass refuse first: a refusal is returned as the API server's.
func dryRunCluster(n int, refuse func(name string, patch []byte) error) *fake.Clientset {
	images := slices.Repeat([]string{"reg/app:v1"}, n)
	objs := planStatefulSet(nil, images...)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.ResourceVersion = "7"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "reg/app:v1", ImageID: imageIDOf("reg/app:v1"),
				ContainerID: "containerd://" + p.Name, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}
	}
	client := fake.NewClientset(objs...)
	client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		if err := refuse(p.Name, p.Patch); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return client
}

// TestDryRunSendsTheStartsWritesOnceEach: a dry run sends the workload's start and the image
// patch of each pod of the first batch, each once, with dryRun All, the pod's patch as the update
// composes it (with its resourceVersion); refusals are reported with the API's reason and
// message, and a start the engine refuses sends nothing.
func TestDryRunSendsTheStartsWritesOnceEach(t *testing.T) {
	sts := workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	spec := Spec{Target: sts, Holder: "cli", Images: map[string]string{"app": "reg/app:v2"}, MaxUnavailable: intstr.FromInt32(1),
		Batches: []intstr.IntOrString{intstr.FromInt32(2), intstr.FromString("100%")}, Timeout: inplace.DefaultProgressDeadline}
	denied := apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(), "web-2", nil)
	denied.ErrStatus.Message = "pods \"web-2\" is forbidden: ValidatingAdmissionPolicy 'no-bad-images' with binding 'b' denied request: bad image"

	t.Run("accepted and refused", func(t *testing.T) {
		client := dryRunCluster(3, func(name string, patch []byte) error {
			if name == "web-2" {
				return denied
			}
			return nil
		})
		r, err := (&Engine{Client: client}).DryRun(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if r.Batch != 1 || !slices.Equal(r.Pods, []string{"web-2", "web-1"}) {
			t.Errorf("first batch %d %v, want 1 [web-2 web-1]", r.Batch, r.Pods)
		}
		if got := r.Accepted(); !slices.Equal(got, []string{"web-1"}) {
			t.Errorf("accepted pods %v", got)
		}
		refused := r.Refused()
		if len(refused) != 1 || refused[0].Name != "web-2" || refused[0].Reason != metav1.StatusReasonInvalid || refused[0].Code != 422 ||
			refused[0].Message != denied.ErrStatus.Message || !apierrors.IsInvalid(refused[0].Err) {
			t.Errorf("refused %+v", refused)
		}
		if len(r.Writes) != 3 || r.Writes[0].Kind != "StatefulSet" || r.Writes[0].Result != DryRunAccepted {
			t.Errorf("writes %+v; want the StatefulSet's first, then two pods'", r.Writes)
		}
		var writes int
		for _, a := range client.Actions() {
			p, ok := a.(clienttesting.PatchActionImpl)
			if !ok {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
					t.Errorf("%s %s, not a dry-run patch", v, a.GetResource().Resource)
				}
				continue
			}
			writes++
			if !slices.Equal(p.PatchOptions.DryRun, []string{metav1.DryRunAll}) {
				t.Errorf("patch of %s %s sent without dryRun All", p.GetResource().Resource, p.Name)
			}
			if p.GetResource().Resource == "pods" {
				checkImagePatch(t, client, p)
			}
		}
		if writes != 3 {
			t.Errorf("%d writes sent, want 3", writes)
		}
	})
	t.Run("a start refused sends nothing", func(t *testing.T) {
		client := dryRunCluster(2, func(string, []byte) error { return nil })
		bad := spec
		bad.Images = map[string]string{"db": "reg/db:v2"}
		_, err := (&Engine{Client: client}).DryRun(context.Background(), bad)
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Fatalf("err %v, want bad input", err)
		}
		noWrites(t, client)
	})
	t.Run("an API server that fails is an error, not a refusal", func(t *testing.T) {
		client := dryRunCluster(2, func(string, []byte) error { return apierrors.NewInternalError(errors.New("etcd down")) })
		_, err := (&Engine{Client: client}).DryRun(context.Background(), spec)
		if !apierrors.IsInternalError(err) {
			t.Fatalf("err %v, want the internal error", err)
		}
	})
}

// checkImagePatch checks that a pod's dry-run patch carries the pod's resourceVersion and puts
// it on the new images with its state.
func checkImagePatch(t *testing.T, client *fake.Clientset, p clienttesting.PatchActionImpl) {
	t.Helper()
	pod, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "shop", p.Name)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := json.Marshal(pod)
	out, err := strategicpatch.StrategicMergePatch(orig, p.Patch, corev1.Pod{})
	if err != nil {
		t.Fatalf("patch %s: %v", p.Patch, err)
	}
	var next corev1.Pod
	if err := json.Unmarshal(out, &next); err != nil {
		t.Fatal(err)
	}
	st, err := inplace.ReadState(&next)
	if next.Spec.Containers[0].Image != "reg/app:v2" || err != nil || st == nil || st.Stage != inplace.StageUpdating || next.ResourceVersion != "7" {
		t.Errorf("pod %s patched to %v, state %+v %v, resourceVersion %s", p.Name, next.Spec.Containers, st, err, next.ResourceVersion)
	}
}
