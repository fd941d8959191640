package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/inplace-rollout/inplace-rollout/pkg/gate"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// onlyGateMissing reports whether the pod runs with every container ready and is not Ready
// only because a readiness gate is not True.
func onlyGateMissing(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Status != corev1.ConditionTrue {
			return false
		}
		if c.Type == corev1.PodReady && (c.Status == corev1.ConditionTrue || c.Reason != "ReadinessGatesNotReady") {
			return false
		}
	}
	return true
}

func gateCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == inplace.ReadinessGate {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestGateControllerMakesGatedPodsReady: an OrderedReady StatefulSet whose template declares
// the readiness gate is stuck at pod 0 without the gate controller, and becomes fully Ready
// with it; a pod recreated later becomes Ready too; a pod in the middle of an update (Draining,
// its condition not yet written) is left alone.
func TestGateControllerMakesGatedPodsReady(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	createGatedStatefulSet(t, ns, "web", 3, appsv1.OrderedReadyPodManagement)

	// Without the controller: web-0 runs with its containers ready, but the gate keeps it not
	// Ready, so the StatefulSet controller never creates web-1.
	env.WaitForPod(t, ns, "web-0", 30*time.Second, "running, not Ready only for its readiness gate", onlyGateMissing)
	waitStatefulSet(t, ns, "web", "one replica, none ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.Replicas == 1 && s.Status.ReadyReplicas == 0
	})
	if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("web-1 exists (err %v) while web-0 is not Ready", err)
	}

	env.StartGateController(t, ns)
	waitStatefulSet(t, ns, "web", "all 3 replicas ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ReadyReplicas == 3
	})
	for _, p := range listPods(t, ns, "app=web") {
		if c := gateCondition(&p); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("pod %s: gate condition %+v, want True", p.Name, c)
		}
	}

	// A pod recreated later gets its gate too.
	old, err := env.Client.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "web-1", 60*time.Second, "recreated and Ready", func(p *corev1.Pod) bool {
		return p.UID != old.UID && cluster.PodReady(p)
	})

	// A pod mid-update: Draining, with no gate condition yet (the engine writes it next). The
	// controller must leave it to the engine. It handles pods one at a time in the order it
	// hears of them, so once a gated pod created after this one is Ready, this one was seen.
	tmpl := gatedTemplate(map[string]string{"app": "bare"})
	st := fmt.Sprintf(`{"rolloutID":"r1","startedAt":%q,"containers":[{"name":"app","beforeImage":%q,"afterImage":%q}],"stage":"Draining","stageAt":%q}`,
		time.Now().UTC().Format(time.RFC3339), appV1, appV2, time.Now().UTC().Format(time.RFC3339))
	drained := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "drained", Namespace: ns, Labels: tmpl.Labels,
		Annotations: map[string]string{inplace.StateAnnotation: st}}, Spec: *tmpl.Spec.DeepCopy()}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, drained, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A gate condition written here already is the failure, reported below.
	env.WaitForPod(t, ns, "drained", 30*time.Second, "running, not Ready only for its readiness gate", func(p *corev1.Pod) bool {
		return onlyGateMissing(p) || gateCondition(p) != nil
	})
	marker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, marker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "marker", 30*time.Second, "Ready", cluster.PodReady)
	p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "drained", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := gateCondition(p); c != nil || cluster.PodReady(p) {
		t.Errorf("pod drained (stage Draining): gate condition %+v, Ready %v; want no condition written and not Ready", c, cluster.PodReady(p))
	}
}

// TestGateControllerNeedsOnlyItsClusterRole applies the shipped RBAC (config/gate-controller)
// and runs the controller as its ServiceAccount: the least-privilege ClusterRole must be enough
// to watch pods and set the gate.
func TestGateControllerNeedsOnlyItsClusterRole(t *testing.T) {
	ns := env.Namespace(t)
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "config", "gate-controller")
	apply := exec.Command(filepath.Join(bin, "kubectl"), "apply", "-n", "inplace-rollout-system",
		"-f", filepath.Join(dir, "namespace.yaml"), "-f", filepath.Join(dir, "rbac.yaml"))
	apply.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("applying the gate controller's RBAC: %v\n%s", err, out)
	}
	as := func(user string) kubernetes.Interface {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	// Without the role, the controller says what it lacks and stops, instead of waiting forever.
	err = gate.Run(context.Background(), as("system:serviceaccount:"+ns+":nobody"), gate.Options{})
	if err == nil || !apierrors.IsForbidden(err) || !contains(err.Error(), "needs get, list and watch on pods") {
		t.Fatalf("gate controller without permissions: %v; want a Forbidden error naming the permissions it needs", err)
	}
	client := as("system:serviceaccount:inplace-rollout-system:inplace-rollout-gate-controller")
	// Cluster-wide, as deployed: the ClusterRole must allow listing pods in every namespace.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gate.Run(ctx, client, gate.Options{Selector: "app=rbac"}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gate controller: %v", err)
		}
	})

	tmpl := gatedTemplate(map[string]string{"app": "rbac"})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "gated", 30*time.Second, "Ready, its gate set by the controller running as its ServiceAccount", cluster.PodReady)
}

// TestGateControllerCommand runs `inplace-rollout gate-controller` as a process, limited to one
// namespace and selector: it sets the gate on a matching pod and logs the pod it wrote, leaves a
// pod outside its selector alone, and exits 0 on SIGTERM.
func TestGateControllerCommand(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "gate-controller", "--namespace", ns, "--selector", "app=mine")
	for _, app := range []string{"other", "mine"} {
		tmpl := gatedTemplate(map[string]string{"app": app})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.WaitForPod(t, ns, "mine", 30*time.Second, "Ready, its gate set by the gate-controller command", cluster.PodReady)
	other := env.WaitForPod(t, ns, "other", 30*time.Second, "running, not Ready only for its readiness gate", onlyGateMissing)
	if c := gateCondition(other); c != nil {
		t.Errorf("pod other (outside --selector): gate condition %+v, want none", c)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gate-controller after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
	}
	log := stderr.String()
	if !contains(log, "readiness gate set") || !contains(log, "pod="+ns+"/mine") || contains(log, "pod="+ns+"/other") {
		t.Errorf("gate-controller log:\n%s\nwant one line naming pod %s/mine and none naming %s/other", log, ns, ns)
	}
}
