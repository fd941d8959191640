package clitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// Images the tests roll out.
const (
	AppV1 = "registry.example/app:v1"
	AppV2 = "registry.example/app:v2"
	AppV3 = "registry.example/app:v3"
)

// Build compiles the command into dir and returns its path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "inplace-rollout")
	build := exec.Command("go", "build", "-o", bin, "github.com/inplace-rollout/inplace-rollout/cmd/inplace-rollout")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building inplace-rollout: %w", err)
	}
	return bin, nil
}

// Result is one run of the command.
type Result struct {
	Code           int
	Stdout, Stderr string
}

func (r Result) String() string {
	return "exit " + strconv.Itoa(r.Code) + "\nstdout:\n" + r.Stdout + "\nstderr:\n" + LastLines(r.Stderr, 15)
}

// Run runs the command against the cluster, as its admin, and waits for it.
func Run(t testing.TB, c *cluster.Cluster, bin string, args ...string) Result {
	t.Helper()
	return RunAs(t, c.Kubeconfig, bin, args...)
}

// RunAs runs the command as the user kubeconfig authenticates, and waits for it.
func RunAs(t testing.TB, kubeconfig, bin string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", args, err)
	}
	return Result{code, out.String(), errOut.String()}
}

// Start starts the command in the background; the test's end kills it if still running.
func Start(t testing.TB, c *cluster.Cluster, bin string, stderr *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	if stderr != nil {
		cmd.Stderr = stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// LogLines are the lines of the log at path that hold every one of subs.
func LogLines(t *testing.T, path string, subs ...string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the log %s: %v", path, err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Template is a pod template with an app container on AppV1 and a sidecar.
func Template(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: AppV1},
			{Name: "sidecar", Image: "registry.example/sidecar:v1"},
		}},
	}
}

// CreateStatefulSet creates a StatefulSet of Template pods labelled app=NAME and waits until
// every replica is Ready.
func CreateStatefulSet(t testing.TB, c *cluster.Cluster, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	return CreateStatefulSetWith(t, c, ns, name, replicas, nil)
}

// CreateStatefulSetWith is CreateStatefulSet with the pod template changed by mutate first (nil
// leaves it as it is).
func CreateStatefulSetWith(t testing.TB, c *cluster.Cluster, ns, name string, replicas int32, mutate func(*corev1.PodTemplateSpec)) *appsv1.StatefulSet {
	t.Helper()
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(context.Background(), statefulSet(ns, name, replicas, mutate), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset: %v", err)
	}
	return WaitStatefulSet(t, c, ns, name, "all replicas ready and updated", func(s *appsv1.StatefulSet) bool { return settled(s, replicas) })
}

// statefulSet is the StatefulSet ns/name of replicas Template pods labelled app=NAME, created
// in parallel, with the template changed by mutate first (nil leaves it as it is).
func statefulSet(ns, name string, replicas int32, mutate func(*corev1.PodTemplateSpec)) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	tmpl := Template(labels)
	if mutate != nil {
		mutate(&tmpl)
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
		},
	}
}

// settled reports whether every one of replicas is Ready and on the StatefulSet's current
// template.
func settled(s *appsv1.StatefulSet, replicas int32) bool {
	return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == replicas && s.Status.UpdatedReplicas == replicas
}

// CreateStatefulSets creates a StatefulSet of replicas Template pods labelled app=NAME for each
// of names, all before waiting, then waits up to timeout until every replica of each is Ready:
// the workloads of a test that rolls many out at once.
func CreateStatefulSets(t testing.TB, c *cluster.Cluster, ns string, names []string, replicas int32, timeout time.Duration) {
	t.Helper()
	for _, name := range names {
		if _, err := c.Client.AppsV1().StatefulSets(ns).Create(context.Background(), statefulSet(ns, name, replicas, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating StatefulSet %s/%s: %v", ns, name, err)
		}
	}
	cluster.WaitFor(t, timeout, fmt.Sprintf("%d StatefulSets of %d Ready replicas in %s", len(names), replicas, ns), func(ctx context.Context) (bool, error) {
		list, err := c.Client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if settled(&list.Items[i], replicas) {
				ready++
			}
		}
		return ready == len(names), nil
	})
}

// CheckRolledOut returns an error unless StatefulSet ns/name's template and every one of its
// pods run image in container app: the rollout a test timed really happened.
func CheckRolledOut(c *cluster.Cluster, ns, name, image string) error {
	ctx := context.Background()
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading StatefulSet %s/%s: %w", ns, name, err)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return fmt.Errorf("listing the pods of %s/%s: %w", ns, name, err)
	}
	on := 0
	for _, p := range pods.Items {
		for _, ct := range p.Spec.Containers {
			if ct.Name == "app" && ct.Image == image {
				on++
			}
		}
	}
	tmpl := ""
	for _, ct := range sts.Spec.Template.Spec.Containers {
		if ct.Name == "app" {
			tmpl = ct.Image
		}
	}
	if want := int(ptr.Deref(sts.Spec.Replicas, 1)); on != want || len(pods.Items) != want || tmpl != image {
		return fmt.Errorf("StatefulSet %s/%s: %d of its %d pods (%d replicas) run %s, its template names %s", ns, name, on, len(pods.Items), want, image, tmpl)
	}
	return nil
}

// WaitStatefulSet polls the StatefulSet until cond holds.
func WaitStatefulSet(t testing.TB, c *cluster.Cluster, ns, name, what string, cond func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
	t.Helper()
	var got *appsv1.StatefulSet
	cluster.WaitFor(t, 60*time.Second, "statefulset "+name+": "+what, func(ctx context.Context) (bool, error) {
		s, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = s
		return cond(s), nil
	})
	return got
}

// ListPods lists the pods matching selector.
func ListPods(t testing.TB, c *cluster.Cluster, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	return list.Items
}

// Main builds the command into *bin, starts a control plane into *env, runs the package's
// tests and cleans up. Call it from TestMain.
func Main(m *testing.M, opts cluster.Options, env **cluster.Cluster, bin *string) int {
	dir, err := os.MkdirTemp("", "inplace-rollout-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return cluster.RunTests(m, opts, env)
}

// CreateDaemonSet creates a DaemonSet of Template pods labelled app=NAME and waits until it
// runs one Ready, updated pod on each of the simulator's nodes.
func CreateDaemonSet(t testing.TB, c *cluster.Cluster, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: Template(labels)},
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating DaemonSet %s/%s: %v", ns, name, err)
	}
	nodes := int32(len(c.Sim.NodeNames()))
	var got *appsv1.DaemonSet
	cluster.WaitFor(t, 60*time.Second, fmt.Sprintf("DaemonSet %s/%s Ready on %d nodes", ns, name, nodes), func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = d
		return d.Status.NumberReady == nodes && d.Status.UpdatedNumberScheduled == nodes, nil
	})
	return got
}

// CreateDeployment creates a Deployment of Template pods labelled app=NAME and waits until its
// controller has rolled it out: every replica updated and available.
func CreateDeployment(t testing.TB, c *cluster.Cluster, ns, name string, replicas int32) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: Template(labels),
		},
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s/%s: %v", ns, name, err)
	}
	var got *appsv1.Deployment
	cluster.WaitFor(t, 60*time.Second, fmt.Sprintf("Deployment %s/%s rolled out", ns, name), func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = d
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == replicas && s.AvailableReplicas == replicas && s.Replicas == replicas, nil
	})
	return got
}

// CreatePods creates n bare pods NAME-0..NAME-(n-1) of Template labelled app=NAME and
// tier=web, owned by no controller, and waits until each is Ready. With gated, they declare the
// readiness gate inplace-rollout.io/ready, which is set True as the gate controller would.
func CreatePods(t testing.TB, c *cluster.Cluster, ns, name string, n int, gated bool) {
	t.Helper()
	ctx := context.Background()
	tmpl := Template(map[string]string{"app": name, "tier": "web"})
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if gated {
		tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	}
	gateTrue := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, inplace.ReadinessGate)
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
		}
	}
	for i := range n {
		name := fmt.Sprintf("%s-%d", name, i)
		if gated {
			c.WaitForPod(t, ns, name, time.Minute, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
			if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(gateTrue), metav1.PatchOptions{}, "status"); err != nil {
				t.Fatalf("setting the readiness gate of pod %s/%s: %v", ns, name, err)
			}
		}
		c.WaitForPod(t, ns, name, time.Minute, "Ready", cluster.PodReady)
	}
}

// ChurnPods writes an annotation on every pod matching selector every interval until the
// returned stop is called (or the test ends), as a kubelet's status updates would: a driver's
// writes, which carry the resourceVersion they read, then meet conflicts and must read the pod
// again. The shorter the interval, the likelier a conflict.
func ChurnPods(t testing.TB, c *cluster.Cluster, ns, selector string, interval time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				// All pods at once, so that each is written every interval, however many.
				patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.inplace-rollout.io/churn":"%d"}}}`, i)
				var wg sync.WaitGroup
				for _, p := range pods.Items {
					wg.Go(func() {
						_, _ = c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
					})
				}
				wg.Wait()
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}
