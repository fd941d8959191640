package argo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// stepPlugin is the step plugin's name in argo-rollouts-config.
const stepPlugin = "inplace-rollout/step"

func argoClient(t *testing.T) argoclient.Interface {
	t.Helper()
	c, err := argoclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building an Argo Rollouts client: %v", err)
	}
	return c
}

// stepConfig is one plugin step's config: the rollout spec of the StatefulSet target on image,
// with short grace and soak so that a rollout takes seconds. extra fields are added as given.
func stepConfig(target, image string, extra map[string]any) map[string]any {
	cfg := map[string]any{
		"target":      map[string]any{"kind": "StatefulSet", "name": target},
		"images":      map[string]any{"app": image},
		"batches":     []any{1, "50%", "100%"},
		"gracePeriod": "1s",
		"soak":        "1s",
		"timeout":     "2m",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// step is a canary step: a plugin step of cfg, or Argo's pause (indefinite) for nil.
func step(t *testing.T, cfg map[string]any) rolloutsv1alpha1.CanaryStep {
	t.Helper()
	if cfg == nil {
		return rolloutsv1alpha1.CanaryStep{Pause: &rolloutsv1alpha1.RolloutPause{}}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rolloutsv1alpha1.CanaryStep{Plugin: &rolloutsv1alpha1.PluginStep{Name: stepPlugin, Config: raw}}
}

// steps builds the canary steps of a Rollout on image: each config is given image before it is
// turned into a step.
type stepsFunc func(image string) []map[string]any

// createRollout creates a Rollout of 0 replicas (steps run all the same, and it drives a
// workload it does not own) whose template runs image, and waits until Argo counts its first
// revision Healthy. Its pods' labels are its own, matching none of the target's.
func createRollout(t *testing.T, ns, name, image string, steps stepsFunc) *rolloutsv1alpha1.Rollout {
	t.Helper()
	return createRolloutWith(t, ns, name, image, steps, nil)
}

// createRolloutWith is createRollout with the pod template changed by mutate first (nil leaves
// it as it is).
func createRolloutWith(t *testing.T, ns, name, image string, steps stepsFunc, mutate func(*corev1.PodTemplateSpec)) *rolloutsv1alpha1.Rollout {
	t.Helper()
	labels := map[string]string{"rollout": name}
	tmpl := clitest.Template(labels)
	tmpl.Spec.Containers[0].Image = image
	if mutate != nil {
		mutate(&tmpl)
	}
	ro := &rolloutsv1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: rolloutsv1alpha1.RolloutSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: tmpl,
			// Longer than any step here takes.
			ProgressDeadlineSeconds: ptr.To[int32](300),
			Strategy:                rolloutsv1alpha1.RolloutStrategy{Canary: &rolloutsv1alpha1.CanaryStrategy{}},
		},
	}
	ro.Spec.Strategy.Canary.Steps = canarySteps(t, steps(image))
	if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Create(context.Background(), ro, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Rollout %s/%s: %v", ns, name, err)
	}
	return waitRollout(t, ns, name, time.Minute, "its first revision Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
}

// canarySteps turns step configs into canary steps (see step).
func canarySteps(t *testing.T, cfgs []map[string]any) []rolloutsv1alpha1.CanaryStep {
	t.Helper()
	var out []rolloutsv1alpha1.CanaryStep
	for _, cfg := range cfgs {
		out = append(out, step(t, cfg))
	}
	return out
}

// setImage changes the Rollout's template to image and its steps to steps(image) in one update,
// which is a new revision for Argo, and returns the hash of the revision it leaves.
func setImage(t *testing.T, ns, name, image string, steps stepsFunc) (oldHash string) {
	t.Helper()
	return setImageSteps(t, ns, name, image, canarySteps(t, steps(image)))
}

// setImageSteps is setImage with any canary steps, Argo's own among them.
func setImageSteps(t *testing.T, ns, name, image string, steps []rolloutsv1alpha1.CanaryStep) (oldHash string) {
	t.Helper()
	return updateRollout(t, ns, name, "setting it to "+image, func(ro *rolloutsv1alpha1.Rollout) {
		ro.Spec.Template.Spec.Containers[0].Image = image
		ro.Spec.Strategy.Canary.Steps = steps
	})
}

// updateTemplate changes the Rollout's pod template by mutate, which is a new revision for
// Argo, and returns the hash of the revision it leaves.
func updateTemplate(t *testing.T, ns, name string, mutate func(*corev1.PodTemplateSpec)) (oldHash string) {
	t.Helper()
	return updateRollout(t, ns, name, "changing its template", func(ro *rolloutsv1alpha1.Rollout) { mutate(&ro.Spec.Template) })
}

// updateRollout changes the Rollout by mutate, read afresh on a conflict, and returns the hash
// of the revision it was on; what says the change, for the failure.
func updateRollout(t *testing.T, ns, name, what string, mutate func(*rolloutsv1alpha1.Rollout)) (oldHash string) {
	t.Helper()
	c := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := c.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		oldHash = ro.Status.CurrentPodHash
		mutate(ro)
		_, err = c.Update(context.Background(), ro, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("Rollout %s/%s, %s: %v", ns, name, what, err)
	}
	return oldHash
}

// waitRollout polls the Rollout until cond holds, failing the test with its last status.
func waitRollout(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*rolloutsv1alpha1.Rollout) bool) *rolloutsv1alpha1.Rollout {
	t.Helper()
	var last *rolloutsv1alpha1.Rollout
	c := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	cluster.WaitFor(t, timeout, fmt.Sprintf("Rollout %s/%s: %s", ns, name, what), func(ctx context.Context) (bool, error) {
		ro, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = ro
		if cond(ro) {
			return true, nil
		}
		return false, fmt.Errorf("last status: %s", describeRollout(ro))
	})
	return last
}

// onNewRevision reports whether the Rollout has left the revision oldHash.
func onNewRevision(ro *rolloutsv1alpha1.Rollout, oldHash string) bool {
	return ro.Status.CurrentPodHash != "" && ro.Status.CurrentPodHash != oldHash
}

func describeRollout(ro *rolloutsv1alpha1.Rollout) string {
	s := ro.Status
	idx := "nil"
	if s.CurrentStepIndex != nil {
		idx = fmt.Sprint(*s.CurrentStepIndex)
	}
	out := fmt.Sprintf("phase=%s message=%q abort=%v step=%s stable=%s current=%s", s.Phase, s.Message, s.Abort, idx, s.StableRS, s.CurrentPodHash)
	if s.Canary.StepPluginStatuses != nil {
		for _, sp := range s.Canary.StepPluginStatuses {
			out += fmt.Sprintf("\n  step %d %s %s: %s %q status=%s", sp.Index, sp.Name, sp.Operation, sp.Phase, sp.Message, sp.Status)
		}
	}
	return out
}

// argoRollouts runs kubectl-argo-rollouts against the test cluster and fails the test on error.
func argoRollouts(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(argoCLI, append(args, "--kubeconfig", env.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl-argo-rollouts %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// podsOn counts the target's pods whose app container is Running and Ready on image, and
// returns every pod's UID by name.
func podsOn(t *testing.T, ns, target, image string) (n int, uids map[string]string) {
	t.Helper()
	uids = map[string]string{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+target) {
		uids[p.Name] = string(p.UID)
		cs := cluster.ContainerStatus(&p, "app")
		if p.Spec.Containers[0].Image == image && cs != nil && cs.Image == image && cs.State.Running != nil && cluster.PodReady(&p) {
			n++
		}
	}
	return n, uids
}

// specImages counts the target's pods whose app container spec is image, whatever their status.
func specImages(t *testing.T, ns, target, image string) int {
	t.Helper()
	n := 0
	for _, p := range clitest.ListPods(t, env, ns, "app="+target) {
		if p.Spec.Containers[0].Image == image {
			n++
		}
	}
	return n
}

// podState is what a rollback must give back: the same pod (UID) running, Ready, the image it
// ran before (imageID: a rollback pins the image by digest).
type podState struct {
	uid, imageID string
	running      bool
}

func podStates(t *testing.T, ns, target string) map[string]podState {
	t.Helper()
	out := map[string]podState{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+target) {
		st := podState{uid: string(p.UID)}
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			st.imageID = cs.ImageID
			st.running = cs.State.Running != nil && cs.Ready && cluster.PodReady(&p)
		}
		out[p.Name] = st
	}
	return out
}

// waitRolledBack waits until every pod of the target is the pod it was in before, Running and
// Ready on the image it ran then.
func waitRolledBack(t *testing.T, ns, target string, before map[string]podState, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, "every pod of "+target+" back on its image", func(ctx context.Context) (bool, error) {
		after := podStates(t, ns, target)
		if !maps.Equal(before, after) {
			return false, fmt.Errorf("before %v, now %v", before, after)
		}
		return true, nil
	})
}

// churnPods writes an annotation on every pod of the target every 20ms until the returned stop
// is called (or the test ends), as a kubelet's status updates would: the plugin's writes, which
// carry the resourceVersion they read, then meet conflicts and must read the pod again.
func churnPods(t *testing.T, ns, target string) (stop func()) {
	t.Helper()
	return clitest.ChurnPods(t, env, ns, "app="+target, 20*time.Millisecond)
}

// healthyOn waits until the Rollout is Healthy on a revision other than old.
func healthyOn(t *testing.T, ns, name, old string) *rolloutsv1alpha1.Rollout {
	t.Helper()
	return waitRollout(t, ns, name, 3*time.Minute, "Healthy on the new revision", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
}

// abortedOn waits until the Rollout is aborted and Degraded on a revision other than old.
func abortedOn(t *testing.T, ns, name, old string) *rolloutsv1alpha1.Rollout {
	t.Helper()
	return waitRollout(t, ns, name, 3*time.Minute, "Degraded, aborted", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseDegraded && ro.Status.Abort
	})
}

// settledOn waits until the Rollout, on a revision other than old, is Healthy or Degraded: the
// end of its steps, whichever way they went, for the test to judge.
func settledOn(t *testing.T, ns, name, old string) *rolloutsv1alpha1.Rollout {
	t.Helper()
	return waitRollout(t, ns, name, 3*time.Minute, "Healthy or Degraded on the new revision", func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, old) && (ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy || ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseDegraded)
	})
}

// lastRun is the last Run of a plugin step recorded in the Rollout's status, or nil.
func lastRun(ro *rolloutsv1alpha1.Rollout) *rolloutsv1alpha1.StepPluginStatus {
	var last *rolloutsv1alpha1.StepPluginStatus
	for i := range ro.Status.Canary.StepPluginStatuses {
		if sp := &ro.Status.Canary.StepPluginStatuses[i]; sp.Operation == rolloutsv1alpha1.StepPluginOperationRun {
			last = sp
		}
	}
	return last
}
