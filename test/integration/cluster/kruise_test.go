package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

var cloneSets = schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"}

// TestKruiseCloneSetInPlaceUpdate starts kruise-manager on the control plane and updates a
// 3-pod CloneSet's image with its InPlaceIfPossible strategy: every pod keeps its UID, runs the
// new image with its container restarted once, and the CloneSet counts 3 updated Ready pods.
// The apiserver calls none of kruise-manager's webhooks.
func TestKruiseCloneSetInPlaceUpdate(t *testing.T) {
	binDir, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(binDir, kruiseProcess)); err != nil {
		t.Skipf("%s is not built (it is not part of make tools): run `%s`", kruiseProcess, KruiseBuild)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	k, err := c.StartKruise(ctx, KruiseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile, err := os.ReadFile(filepath.Join(c.Dir, kruiseProcess+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(k.PID()) + "\n"; string(pidFile) != want {
		t.Errorf("%s.pid holds %q, want %q", kruiseProcess, pidFile, want)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(k.PID()), "stat")); err != nil {
		t.Errorf("kruise-manager's /proc stat, which the benchmark reads: %v", err)
	}

	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	sets := dyn.Resource(cloneSets).Namespace(ns)
	labels := map[string]any{"app": "web"}
	// No webhook defaults it: every field the controller reads is set.
	cs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.kruise.io/v1alpha1",
		"kind":       "CloneSet",
		"metadata":   map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas":             int64(3),
			"revisionHistoryLimit": int64(10),
			"selector":             map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{"containers": []any{
					map[string]any{"name": "app", "image": "registry.example/app:v1"},
				}},
			},
			"scaleStrategy": map[string]any{},
			"updateStrategy": map[string]any{
				"type":           "InPlaceIfPossible",
				"partition":      int64(0),
				"maxUnavailable": int64(1),
				"maxSurge":       int64(0),
			},
		},
	}}
	if _, err := sets.Create(ctx, cs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CloneSet %s/web: %v", ns, err)
	}
	waitCloneSet(t, sets, "3 Ready replicas", func(status map[string]any) bool {
		return status["readyReplicas"] == int64(3) && status["updatedReadyReplicas"] == int64(3)
	})
	before := podsByName(t, c, ns, 3)

	patch := []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.example/app:v2"}]`)
	if _, err := sets.Patch(ctx, "web", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("changing CloneSet %s/web's image: %v", ns, err)
	}
	waitCloneSet(t, sets, "3 updated Ready replicas of the new revision", func(status map[string]any) bool {
		return status["updatedReplicas"] == int64(3) && status["updatedReadyReplicas"] == int64(3) && status["readyReplicas"] == int64(3)
	})
	after := podsByName(t, c, ns, 3)
	for name, old := range before {
		pod, ok := after[name]
		if !ok {
			t.Errorf("pod %s/%s is gone after the update: the CloneSet recreated it", ns, name)
			continue
		}
		if pod.UID != old.UID {
			t.Errorf("pod %s/%s UID %s, was %s: recreated, not updated in place", ns, name, pod.UID, old.UID)
		}
		if got := pod.Spec.Containers[0].Image; got != "registry.example/app:v2" {
			t.Errorf("pod %s/%s spec image %s, want registry.example/app:v2", ns, name, got)
		}
		was, now := ContainerStatus(old, "app"), ContainerStatus(pod, "app")
		if was == nil || now == nil {
			t.Errorf("pod %s/%s: no status of container app before (%v) or after (%v)", ns, name, was, now)
			continue
		}
		if now.Image != "registry.example/app:v2" || now.ImageID == was.ImageID {
			t.Errorf("pod %s/%s runs image %s (%s), was %s (%s): want registry.example/app:v2 with a new imageID", ns, name, now.Image, now.ImageID, was.Image, was.ImageID)
		}
		if now.RestartCount != was.RestartCount+1 {
			t.Errorf("pod %s/%s restartCount %d, was %d: want one restart", ns, name, now.RestartCount, was.RestartCount)
		}
		if !PodReady(pod) {
			t.Errorf("pod %s/%s is not Ready: %s", ns, name, describeStatus(pod))
		}
	}

	// Webhooks off: kruise-manager filled the configurations it requires from empty ones.
	admission := c.Client.AdmissionregistrationV1()
	m, err := admission.MutatingWebhookConfigurations().Get(ctx, kruiseMutatingWebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := admission.ValidatingWebhookConfigurations().Get(ctx, kruiseValidatingWebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Webhooks) != 0 || len(v.Webhooks) != 0 {
		t.Errorf("kruise-manager registered webhooks: %d mutating, %d validating; want none", len(m.Webhooks), len(v.Webhooks))
	}

	pid := k.PID()
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kruise-manager (pid %d) after Stop: signal 0 gave %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, kruiseProcess+".pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.pid after Stop: %v, want it removed", kruiseProcess, err)
	}
}

// TestKruiseCRDsAreWhereTheHarnessReadsThem reads every CRD StartKruise installs from the
// OpenKruise module, so that a version bump that moves one fails here, without a cluster.
func TestKruiseCRDsAreWhereTheHarnessReadsThem(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := KruiseModuleDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range kruiseCRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := readYAML(filepath.Join(dir, "config", "crd", "bases", f), &crd); err != nil {
			t.Errorf("OpenKruise %s: %v", KruiseVersion, err)
			continue
		}
		if crd.Spec.Group != "apps.kruise.io" {
			t.Errorf("OpenKruise %s: %s holds a CRD of group %q, want apps.kruise.io", KruiseVersion, f, crd.Spec.Group)
		}
	}
}

// waitCloneSet polls the CloneSet web until done holds for its status, once the controller has
// observed its latest generation.
func waitCloneSet(t *testing.T, sets dynamic.ResourceInterface, what string, done func(status map[string]any) bool) {
	t.Helper()
	WaitFor(t, 2*time.Minute, "CloneSet web: "+what, func(ctx context.Context) (bool, error) {
		got, err := sets.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status, _, _ := unstructured.NestedMap(got.Object, "status")
		if status["observedGeneration"] != got.GetGeneration() || !done(status) {
			return false, fmt.Errorf("generation %d, status %v", got.GetGeneration(), status)
		}
		return true, nil
	})
}

// podsByName lists the namespace's pods, failing the test unless there are want.
func podsByName(t *testing.T, c *Cluster, ns string, want int) map[string]*corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != want {
		t.Fatalf("%d pods in %s, want %d", len(list.Items), ns, want)
	}
	pods := make(map[string]*corev1.Pod, want)
	for i := range list.Items {
		pods[list.Items[i].Name] = &list.Items[i]
	}
	return pods
}
