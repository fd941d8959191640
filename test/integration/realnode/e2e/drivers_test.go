package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/typed/rollouts/v1alpha1"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The drivers start once, on the first test that needs them, and stop with the cluster.
var (
	argoOnce, tektonOnce sync.Once
	argoErr, tektonErr   error
)

func startArgo(t *testing.T) argoclient.Interface {
	t.Helper()
	argoOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, argoErr = env.StartArgo(ctx, cluster.ArgoOptions{PluginBinary: cli})
	})
	must(t, argoErr, "starting Argo Rollouts with the plugins")
	c, err := argoclient.NewForConfig(env.Config)
	must(t, err, "building an Argo Rollouts client")
	return c
}

func startTekton(t *testing.T) tektonclient.Interface {
	t.Helper()
	tektonOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, tektonErr = env.StartTekton(ctx); tektonErr == nil {
			_, tektonErr = env.StartInplaceTekton(ctx, cli)
		}
	})
	must(t, tektonErr, "starting Tekton Pipelines and the CustomRun controller")
	c, err := tektonclient.NewForConfig(env.Config)
	must(t, err, "building a Tekton client")
	return c
}

// The Argo Rollouts step plugin rolls a StatefulSet on the real node in place when the
// Rollout's template changes.
func TestArgoStepPlugin(t *testing.T) {
	full(t)
	ac := startArgo(t).ArgoprojV1alpha1()
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")

	steps := func(tag string) []rolloutsv1alpha1.CanaryStep {
		cfg, err := json.Marshal(map[string]any{
			"target":  map[string]any{"kind": "StatefulSet", "name": "web"},
			"images":  map[string]any{"app": image(tag)},
			"batches": []any{1, "100%"},
			"soak":    "1s",
			"timeout": "2m",
		})
		must(t, err, "encoding the step config")
		return []rolloutsv1alpha1.CanaryStep{{Plugin: &rolloutsv1alpha1.PluginStep{Name: "inplace-rollout/step", Config: cfg}}}
	}
	labels := map[string]string{"rollout": "web"}
	ro := &rolloutsv1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: rolloutsv1alpha1.RolloutSpec{
			Replicas:                ptr.To[int32](0),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			Template:                corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image("v1")}}}},
			ProgressDeadlineSeconds: ptr.To[int32](300),
			Strategy:                rolloutsv1alpha1.RolloutStrategy{Canary: &rolloutsv1alpha1.CanaryStrategy{Steps: steps("v1")}},
		},
	}
	_, err := ac.Rollouts(ns).Create(context.Background(), ro, metav1.CreateOptions{})
	must(t, err, "creating Rollout %s/web", ns)
	waitRollout(t, ac, ns, "its first revision Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
	var oldHash string
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := ac.Rollouts(ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		oldHash = ro.Status.CurrentPodHash
		ro.Spec.Template.Spec.Containers[0].Image = image("v2")
		ro.Spec.Strategy.Canary.Steps = steps("v2")
		_, err = ac.Rollouts(ns).Update(context.Background(), ro, metav1.UpdateOptions{})
		return err
	}), "setting Rollout %s/web to v2", ns)
	waitRollout(t, ac, ns, "v2 Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.CurrentPodHash != oldHash && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
}

func waitRollout(t *testing.T, ac argov1alpha1.ArgoprojV1alpha1Interface, ns, what string, cond func(*rolloutsv1alpha1.Rollout) bool) {
	t.Helper()
	cluster.WaitFor(t, 3*time.Minute, "Rollout "+ns+"/web: "+what, func(ctx context.Context) (bool, error) {
		ro, err := ac.Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cond(ro) {
			return true, nil
		}
		return false, fmt.Errorf("phase %s: %s", ro.Status.Phase, ro.Status.Message)
	})
}

// The Tekton custom task rolls a StatefulSet on the real node in place.
func TestTektonCustomRun(t *testing.T) {
	full(t)
	tc := startTekton(t).TektonV1beta1()
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	run := &v1beta1.CustomRun{
		ObjectMeta: metav1.ObjectMeta{Name: "web-v2", Namespace: ns},
		Spec: v1beta1.CustomRunSpec{
			CustomSpec: &v1beta1.EmbeddedCustomRunSpec{
				TypeMeta: runtime.TypeMeta{APIVersion: "inplace-rollout.io/v1alpha1", Kind: "InPlaceRollout"},
				Spec:     runtime.RawExtension{Raw: []byte(`{"target":{"kind":"StatefulSet","name":"web"},"batches":[1,"100%"]}`)},
			},
			Params: v1beta1.Params{{Name: "images", Value: v1beta1.ParamValue{Type: v1beta1.ParamTypeArray, ArrayVal: []string{"app=" + image("v2")}}}},
		},
	}
	_, err := tc.CustomRuns(ns).Create(context.Background(), run, metav1.CreateOptions{})
	must(t, err, "creating CustomRun %s/web-v2", ns)
	var last *v1beta1.CustomRun
	cluster.WaitFor(t, 3*time.Minute, "CustomRun "+ns+"/web-v2 done", func(ctx context.Context) (bool, error) {
		r, err := tc.CustomRuns(ns).Get(ctx, "web-v2", metav1.GetOptions{})
		last = r
		return err == nil && r.IsDone(), err
	})
	if c := last.Status.GetCondition(apis.ConditionSucceeded); c == nil || !c.IsTrue() {
		t.Fatalf("CustomRun %s/web-v2 did not succeed: %+v", ns, c)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
}
