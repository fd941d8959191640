package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

const (
	imageV1 = "registry.example/app:v1"
	imageV2 = "registry.example/app:v2"
	sidecar = "registry.example/sidecar:v1"
)

func podTemplate(labels map[string]string, gates ...corev1.PodConditionType) corev1.PodTemplateSpec {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "app", Image: imageV1},
				{Name: "sidecar", Image: sidecar},
			},
		},
	}
	for _, g := range gates {
		tmpl.Spec.ReadinessGates = append(tmpl.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	return tmpl
}

func createPod(t *testing.T, ns, name string, tmpl corev1.PodTemplateSpec) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name, pod.Namespace = name, ns
	created, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return created
}

func patchImage(t *testing.T, ns, pod, container, image string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"image":%q}]}}`, container, image)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching image of %s/%s: %v", ns, pod, err)
	}
}

func TestStatefulSetPodsRunAndBecomeReady(t *testing.T) {
	ns := env.Namespace(t)
	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](5),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         "web",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            podTemplate(labels),
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset: %v", err)
	}
	cluster.WaitFor(t, 60*time.Second, "5 ready replicas reported by the StatefulSet controller", func(ctx context.Context) (bool, error) {
		got, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ReadyReplicas == 5 && got.Status.UpdatedReplicas == 5, nil
	})
	pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	if len(pods.Items) != 5 {
		t.Fatalf("got %d pods, want 5", len(pods.Items))
	}
	ips := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || !cluster.PodReady(&p) {
			t.Errorf("pod %s: phase %s ready %v, want Running and Ready", p.Name, p.Status.Phase, cluster.PodReady(&p))
		}
		if p.Spec.NodeName == "" || p.Status.PodIP == "" || ips[p.Status.PodIP] {
			t.Errorf("pod %s: node %q IP %q: want a node and a unique IP", p.Name, p.Spec.NodeName, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = true
		for _, cs := range p.Status.ContainerStatuses {
			if !strings.Contains(cs.ImageID, "@sha256:") || cs.ContainerID == "" || cs.RestartCount != 0 {
				t.Errorf("pod %s container %s: imageID %q containerID %q restarts %d", p.Name, cs.Name, cs.ImageID, cs.ContainerID, cs.RestartCount)
			}
		}
	}
}

func TestDaemonSetPodRunsOnEveryNode(t *testing.T) {
	ns := env.Namespace(t)
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels),
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating daemonset: %v", err)
	}
	nodes := len(env.Sim.NodeNames())
	cluster.WaitFor(t, 60*time.Second, "a ready pod on every node", func(ctx context.Context) (bool, error) {
		got, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return int(got.Status.NumberReady) == nodes && int(got.Status.DesiredNumberScheduled) == nodes, nil
	})
}

func TestImagePatchRestartsOnlyThatContainer(t *testing.T) {
	ns := env.Namespace(t)
	createPod(t, ns, "p", podTemplate(nil))
	before := env.WaitForPod(t, ns, "p", 30*time.Second, "Ready", cluster.PodReady)
	appBefore, sideBefore := *cluster.ContainerStatus(before, "app"), *cluster.ContainerStatus(before, "sidecar")

	patchImage(t, ns, "p", "app", imageV2)
	after := env.WaitForPod(t, ns, "p", 30*time.Second, "app on v2 and Ready", func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.Image == "registry.example/app:v2" && cluster.PodReady(p)
	})
	app, side := cluster.ContainerStatus(after, "app"), cluster.ContainerStatus(after, "sidecar")
	if app.RestartCount != appBefore.RestartCount+1 {
		t.Errorf("app restartCount = %d, want %d", app.RestartCount, appBefore.RestartCount+1)
	}
	if app.ImageID == appBefore.ImageID || !strings.HasPrefix(app.ImageID, "registry.example/app@sha256:") {
		t.Errorf("app imageID = %q (before %q), want a new registry.example/app@sha256: digest", app.ImageID, appBefore.ImageID)
	}
	if app.ContainerID == appBefore.ContainerID {
		t.Errorf("app containerID did not change: %q", app.ContainerID)
	}
	if side.RestartCount != sideBefore.RestartCount || side.ContainerID != sideBefore.ContainerID {
		t.Errorf("sidecar restarted: restarts %d -> %d, containerID %q -> %q", sideBefore.RestartCount, side.RestartCount, sideBefore.ContainerID, side.ContainerID)
	}
	if after.UID != before.UID || after.Status.PodIP != before.Status.PodIP || after.Spec.NodeName != before.Spec.NodeName {
		t.Errorf("pod identity changed: UID %s->%s IP %s->%s node %s->%s", before.UID, after.UID,
			before.Status.PodIP, after.Status.PodIP, before.Spec.NodeName, after.Spec.NodeName)
	}
	// The restart happened once: it does not keep climbing.
	time.Sleep(time.Second)
	settled := env.WaitForPod(t, ns, "p", 5*time.Second, "read", func(*corev1.Pod) bool { return true })
	if got := cluster.ContainerStatus(settled, "app").RestartCount; got != app.RestartCount {
		t.Errorf("app restartCount kept moving: %d -> %d", app.RestartCount, got)
	}
}

func TestFailureImages(t *testing.T) {
	tests := []struct {
		name, image, reason string
	}{
		{"crash", "registry.example/app:crash-1", "CrashLoopBackOff"},
		{"pull", kubeletsim.NotFoundHost + "/app:v2", "ImagePullBackOff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			createPod(t, ns, "p", podTemplate(nil))
			before := env.WaitForPod(t, ns, "p", 30*time.Second, "Ready", cluster.PodReady)
			patchImage(t, ns, "p", "app", tt.image)
			after := env.WaitForPod(t, ns, "p", 30*time.Second, tt.reason, func(p *corev1.Pod) bool {
				cs := cluster.ContainerStatus(p, "app")
				return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == tt.reason
			})
			if cluster.PodReady(after) {
				t.Errorf("pod is Ready with a failing container")
			}
			if after.UID != before.UID {
				t.Errorf("pod UID changed")
			}
			if tt.reason == "CrashLoopBackOff" {
				// The restart count keeps climbing.
				first := cluster.ContainerStatus(after, "app").RestartCount
				env.WaitForPod(t, ns, "p", 30*time.Second, "restartCount climbing", func(p *corev1.Pod) bool {
					return cluster.ContainerStatus(p, "app").RestartCount >= first+2
				})
			}
		})
	}
}

func TestReadinessGate(t *testing.T) {
	const gate corev1.PodConditionType = "inplace-rollout.io/ready"
	ns := env.Namespace(t)
	createPod(t, ns, "p", podTemplate(nil, gate))
	env.WaitForPod(t, ns, "p", 30*time.Second, "containers ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && conditionStatus(p, corev1.ContainersReady) == corev1.ConditionTrue
	})
	// Containers are ready, but the gate has no condition yet: the pod must not be Ready.
	time.Sleep(500 * time.Millisecond)
	pod := env.WaitForPod(t, ns, "p", 5*time.Second, "read", func(*corev1.Pod) bool { return true })
	if cluster.PodReady(pod) {
		t.Fatalf("pod is Ready before its readiness gate is True")
	}

	setGate := func(status corev1.ConditionStatus) {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q}]}}`, gate, status)
		if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "p", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("setting gate %s: %v", status, err)
		}
	}
	setGate(corev1.ConditionTrue)
	env.WaitForPod(t, ns, "p", 10*time.Second, "Ready with the gate True", cluster.PodReady)
	setGate(corev1.ConditionFalse)
	pod = env.WaitForPod(t, ns, "p", 10*time.Second, "not Ready with the gate False", func(p *corev1.Pod) bool { return !cluster.PodReady(p) })
	if conditionStatus(pod, gate) != corev1.ConditionFalse {
		t.Errorf("gate condition lost: %v", pod.Status.Conditions)
	}
}

func TestRetagChangesImageIDBehindTag(t *testing.T) {
	ns := env.Namespace(t)
	const tag = "registry.example/retag:stable"
	tmpl := podTemplate(nil)
	tmpl.Spec.Containers[0].Image = tag
	createPod(t, ns, "old", tmpl)
	old := env.WaitForPod(t, ns, "old", 30*time.Second, "Ready", cluster.PodReady)
	oldID := cluster.ContainerStatus(old, "app").ImageID

	digest := kubeletsim.DigestFor(ns)
	if err := env.Sim.Retag(tag, digest); err != nil {
		t.Fatalf("retag: %v", err)
	}
	createPod(t, ns, "new", tmpl)
	fresh := env.WaitForPod(t, ns, "new", 30*time.Second, "Ready", cluster.PodReady)
	newID := cluster.ContainerStatus(fresh, "app").ImageID
	if want := "registry.example/retag@" + digest; newID != want {
		t.Errorf("imageID after retag = %q, want %q", newID, want)
	}
	if newID == oldID {
		t.Errorf("imageID did not change behind the tag: %q", newID)
	}
	if got := cluster.ContainerStatus(fresh, "app").Image; got != tag {
		t.Errorf("image = %q, want the unchanged tag %q", got, tag)
	}
}

func TestPrometheusScrapesTraffic(t *testing.T) {
	ns := env.Namespace(t)
	createPod(t, ns, "p", podTemplate(nil))
	env.WaitForPod(t, ns, "p", 30*time.Second, "Ready", cluster.PodReady)
	ready := time.Now()

	client, err := promapi.NewClient(promapi.Config{Address: env.PrometheusURL})
	if err != nil {
		t.Fatalf("prometheus client: %v", err)
	}
	api := promv1.NewAPI(client)
	query := fmt.Sprintf(`sum(rate(http_requests_total{namespace=%q}[30s]))`, ns)
	var value float64
	cluster.WaitFor(t, 20*time.Second, "a positive request rate in Prometheus", func(ctx context.Context) (bool, error) {
		res, _, err := api.Query(ctx, query, time.Now())
		if err != nil {
			return false, err
		}
		vec, ok := res.(model.Vector)
		if !ok || len(vec) == 0 {
			return false, fmt.Errorf("result %v", res)
		}
		value = float64(vec[0].Value)
		return value > 0, nil
	})
	t.Logf("%s = %.2f req/s, %s after the pod became Ready", query, value, time.Since(ready).Round(100*time.Millisecond))
}

func conditionStatus(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// TestKubeletSimProcess runs the simulator as the command `make cluster-up` users run
// (test/integration/cmd/kubeletsim), beside the in-process one, on a node of its own: it binds
// and runs a pod pinned there, exits 0 on SIGTERM, and once restarted adopts that pod unchanged
// and gives a new pod another IP.
func TestKubeletSimProcess(t *testing.T) {
	const node = "proc-node-0"
	bin := buildKubeletSim(t)
	ns := env.Namespace(t)
	// Registered after Namespace, so it runs before the namespace is deleted: once the process is
	// gone no kubelet serves the node, so its pods are removed at once, then the node itself, for
	// no later controller to count it.
	t.Cleanup(func() {
		ctx := context.Background()
		if err := env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
			t.Errorf("removing the pods of %s: %v", node, err)
		}
		if err := env.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing node %s: %v", node, err)
		}
	})
	tmpl := podTemplate(nil)
	tmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
	runningOnNode := func(p *corev1.Pod) bool {
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && cluster.PodReady(p)
	}
	logPath := filepath.Join(t.TempDir(), "kubeletsim.log")

	first := startKubeletSim(t, bin, logPath)
	createPod(t, ns, "a", tmpl)
	a := env.WaitForPod(t, ns, "a", 30*time.Second, "bound to "+node+", Running and Ready", runningOnNode)
	first.stop(t)

	second := startKubeletSim(t, bin, logPath)
	createPod(t, ns, "b", tmpl)
	b := env.WaitForPod(t, ns, "b", 30*time.Second, "bound to "+node+", Running and Ready", runningOnNode)
	adopted := env.WaitForPod(t, ns, "a", 5*time.Second, "still Running and Ready", runningOnNode)
	second.stop(t)

	if b.Status.PodIP == a.Status.PodIP {
		t.Errorf("new pod b got IP %s, which adopted pod a holds", b.Status.PodIP)
	}
	if adopted.Status.PodIP != a.Status.PodIP {
		t.Errorf("adopted pod a: IP %s -> %s, want it kept", a.Status.PodIP, adopted.Status.PodIP)
	}
	for _, before := range a.Status.ContainerStatuses {
		after := cluster.ContainerStatus(adopted, before.Name)
		if after == nil || after.ContainerID != before.ContainerID || after.RestartCount != before.RestartCount {
			t.Errorf("adopted pod a, container %s: was %s with %d restarts, now %+v; want it unchanged", before.Name, before.ContainerID, before.RestartCount, after)
		}
	}
}

// buildKubeletSim builds the kubeletsim command into a temporary directory.
func buildKubeletSim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubeletsim")
	// go test puts its own go first in PATH.
	cmd := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "github.com/inplace-rollout/inplace-rollout/test/integration/cmd/kubeletsim")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the kubeletsim command: %v\n%s", err, out)
	}
	return bin
}

// simProcess is a running kubeletsim command.
type simProcess struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // of Wait, once done is closed
}

// startKubeletSim starts the command with one node, proc-node-0, appending its output to
// logPath, which the test log shows if the test fails. The process is killed when the test
// ends if it is still running, and by the kernel if the test binary dies.
func startKubeletSim(t *testing.T, bin, logPath string) *simProcess {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("opening the kubeletsim log: %v", err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+env.Kubeconfig, "--nodes=1", "--node-prefix=proc-node-",
		"--pull-delay=50ms", "--start-delay=50ms")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting the kubeletsim command: %v", err)
	}
	p := &simProcess{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("kubeletsim command output:\n%s", out)
		}
	})
	return p
}

// stop sends SIGTERM and fails the test unless the process exits 0 within 10 s.
func (p *simProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("sending SIGTERM to kubeletsim (pid %d): %v", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("kubeletsim exited after SIGTERM: %v, want exit 0", p.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("kubeletsim (pid %d) still running 10 s after SIGTERM", p.cmd.Process.Pid)
	}
}
