package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// A Deployment on the real node, rolled in place: paused by the CLI while its pods change, and
// every pod kept.
func TestDeploymentInPlace(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	labels := map[string]string{"app": "api"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)},
	}
	_, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{})
	must(t, err, "creating Deployment %s/api", ns)
	cluster.WaitFor(t, 90*time.Second, "Deployment api available", func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "api", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == 3 && d.Status.UpdatedReplicas == 3, err
	})
	before := identities(t, ns, "app=api")
	if r := run(t, "run", "-n", ns, "--target", "deployment/api", "--image", "app="+image("v2"), "--batches", "1,100%"); r.Code != 0 {
		t.Fatalf("run v2: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=api"), 1)
	onDigest(t, ns, "app=api", digest(t, "v2"))
}

// A DaemonSet whose nodeSelector names the real node: its one pod there, rolled in place.
func TestDaemonSetInPlace(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)},
	}
	_, err := env.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{})
	must(t, err, "creating DaemonSet %s/agent", ns)
	cluster.WaitFor(t, 90*time.Second, "DaemonSet agent Ready on the real node", func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		return err == nil && d.Status.DesiredNumberScheduled == 1 && d.Status.NumberReady == 1 && d.Status.UpdatedNumberScheduled == 1, err
	})
	before := identities(t, ns, "app=agent")
	if r := run(t, "run", "-n", ns, "--target", "daemonset/agent", "--image", "app="+image("v2")); r.Code != 0 {
		t.Fatalf("run v2: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=agent"), 1)
	onDigest(t, ns, "app=agent", digest(t, "v2"))
}

// Pods no controller owns, chosen by label.
func TestSelectedPodsInPlace(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	tmpl := template(map[string]string{"app": "loose"})
	for i := range 2 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("loose-%d", i), Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		_, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		must(t, err, "creating pod %s/%s", ns, pod.Name)
		env.WaitForPod(t, ns, pod.Name, 60*time.Second, "Ready", cluster.PodReady)
	}
	before := identities(t, ns, "app=loose")
	if r := run(t, "run", "-n", ns, "--target", "pods", "--selector", "app=loose", "--image", "app="+image("v3")); r.Code != 0 {
		t.Fatalf("run v3: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=loose"), 1)
	onDigest(t, ns, "app=loose", digest(t, "v3"))
}

// The CLI killed with SIGKILL mid-rollout; the same command again finishes it, each pod
// restarted once.
func TestResumeAfterSIGKILL(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + image("v2"), "--batches", "1,2,100%", "--soak", "3s"}
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, args...)
	env.WaitForPod(t, ns, "web-2", 60*time.Second, "updated in place", func(p *corev1.Pod) bool {
		st, err := inplace.ReadState(p)
		return err == nil && st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
	})
	must(t, cmd.Process.Signal(syscall.SIGKILL), "killing the CLI")
	_ = cmd.Wait()
	if r := run(t, args...); r.Code != 0 {
		t.Fatalf("run again after SIGKILL: %s\nfirst run:\n%s", r, clitest.LastLines(stderr.String(), 10))
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))
}

// Behind a Service, with the readiness gate and the gate controller: each pod leaves the
// Service's EndpointSlice before its container restarts and comes back after, and when run
// exits every pod is Ready.
func TestReadinessGateDrainsEndpointSlice(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	env.StartGateController(t, ns)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	_, err := env.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	must(t, err, "creating Service %s/web", ns)
	labels := map[string]string{"app": "web"}
	tmpl := template(labels)
	tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(2)), ServiceName: "web", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	_, err = env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	must(t, err, "creating StatefulSet %s/web", ns)
	clitest.WaitStatefulSet(t, env, ns, "web", "2 replicas Ready through the gate", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 2 })

	// Every change of each pod's endpoint readiness, as the EndpointSlice controller writes it.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	seen := map[string][]bool{}
	done := make(chan struct{})
	w, err := env.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	must(t, err, "watching the EndpointSlices of %s/web", ns)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, e := range es.Endpoints {
				if e.TargetRef == nil {
					continue
				}
				ready := e.Conditions.Ready != nil && *e.Conditions.Ready
				if s := seen[e.TargetRef.Name]; len(s) == 0 || s[len(s)-1] != ready {
					seen[e.TargetRef.Name] = append(s, ready)
				}
			}
		}
	}()
	before := identities(t, ns, "app=web")
	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v2"), "--grace", "2s")
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		if !cluster.PodReady(&p) {
			t.Errorf("pod %s not Ready when run exited: the rollout ended before the pod was back", p.Name)
		}
	}
	time.Sleep(2 * time.Second) // the EndpointSlice controller's last writes
	cancel()
	<-done
	if r.Code != 0 {
		t.Fatalf("run v2: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	for _, name := range []string{"web-0", "web-1"} {
		if s := seen[name]; len(s) < 3 || !s[len(s)-1] || !containsFalse(s) {
			t.Errorf("endpoint of %s went %v, want ready, not ready while it restarted, then ready", name, s)
		}
	}
}

func containsFalse(s []bool) bool {
	for _, b := range s {
		if !b {
			return true
		}
	}
	return false
}

// --pre-pull on the real node: one puller pod pulls v3 there before the pods restart, then is
// gone.
func TestPrePull(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 2)
	before := identities(t, ns, "app=web")
	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v3"), "--pre-pull", "--puller-image", env.PullerImage)
	if r.Code != 0 {
		t.Fatalf("run --pre-pull: %s", r)
	}
	if !regexp.MustCompile(`msg="pulling the new images" .*nodes=` + env.RealNode.Name + `\b`).MatchString(r.Stderr) {
		t.Errorf("the run did not pull onto the real node first:\n%s", clitest.LastLines(r.Stderr, 20))
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v3"))
	cluster.WaitFor(t, 30*time.Second, "puller pods gone", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: prepull.LabelRollout})
		return err == nil && len(pods.Items) == 0, err
	})
}

// analysisConfig writes an analysis config for the cluster's Prometheus, on the error rate of
// the real app's own metrics.
func analysisConfig(t *testing.T) string {
	t.Helper()
	cfg := fmt.Sprintf("prometheus:\n  address: %q\ninterval: 1s\ncount: 3\nwindow: 5s\n", env.PrometheusURL)
	p := filepath.Join(t.TempDir(), "analysis.yaml")
	must(t, os.WriteFile(p, []byte(cfg), 0o600), "writing %s", p)
	return p
}
