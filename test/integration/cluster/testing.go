package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/inplace-rollout/inplace-rollout/pkg/gate"
)

// RunTests starts one control plane for a test package, stores it in *into, runs the tests
// and stops it. Call it from TestMain:
//
//	var env *cluster.Cluster
//	func TestMain(m *testing.M) { os.Exit(cluster.RunTests(m, cluster.Options{}, &env)) }
func RunTests(m *testing.M, opts Options, into **Cluster) int {
	if opts.Logger == nil && os.Getenv("INPLACE_ROLLOUT_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control plane ready in %s\n", c.BootDuration.Round(time.Millisecond))
	*into = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Namespace creates a namespace named after the test and deletes it when the test ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, name)
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-") + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// CallsByTest merges calls by namespace (AuditedCallsByNamespace) by the test that made each
// namespace with Namespace, named as Namespace spells it ("testkinds-daemonset" for
// TestKinds/daemonset, which may make several); the calls in other namespaces keep the
// namespace's name, and the cluster-wide ones are under "cluster-wide".
func CallsByTest(byNamespace map[string]map[APICall]int) map[string]map[APICall]int {
	out := map[string]map[APICall]int{}
	for ns, calls := range byNamespace {
		op := ns
		switch {
		case ns == "":
			op = "cluster-wide"
		case strings.HasPrefix(ns, "test") && len(ns) > 6 && ns[len(ns)-6] == '-':
			op = ns[:len(ns)-6] // the random suffix
		}
		if out[op] == nil {
			out[op] = map[APICall]int{}
		}
		for call, n := range calls {
			out[op][call] += n
		}
	}
	return out
}

// WaitForPod polls the pod until done returns true, failing the test after timeout with the
// last state seen.
func (c *Cluster) WaitForPod(t testing.TB, namespace, name string, timeout time.Duration, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	WaitFor(t, timeout, fmt.Sprintf("pod %s/%s: %s", namespace, name, what), func(ctx context.Context) (bool, error) {
		pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pod
		if done(pod) {
			return true, nil
		}
		return false, fmt.Errorf("last status: %s", describeStatus(pod))
	})
	return last
}

// WaitFor polls cond until it returns true, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ContainerStatus returns the named container's status, or nil.
func ContainerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func describeStatus(pod *corev1.Pod) string {
	if pod == nil {
		return "<never read>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ready=%v node=%q", pod.Status.Phase, PodReady(pod), pod.Spec.NodeName)
	for _, cs := range pod.Status.ContainerStatuses {
		state := "?"
		switch {
		case cs.State.Running != nil:
			state = "Running"
		case cs.State.Waiting != nil:
			state = "Waiting:" + cs.State.Waiting.Reason
		case cs.State.Terminated != nil:
			state = "Terminated:" + cs.State.Terminated.Reason
		}
		fmt.Fprintf(&b, " [%s %s image=%s imageID=%s restarts=%d ready=%v]", cs.Name, state, cs.Image, cs.ImageID, cs.RestartCount, cs.Ready)
	}
	return b.String()
}

// StartGateController runs the readiness gate controller (pkg/gate) in this process for one
// namespace until the test ends, for tests whose pod templates declare the
// inplace-rollout.io/ready gate. Tests that do not call it see pods with the gate stay not Ready.
func (c *Cluster) StartGateController(t testing.TB, namespace string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- gate.Run(ctx, c.Client, gate.Options{Namespace: namespace, Logger: c.log.With("component", "gate-controller")})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gate controller: %v", err)
		}
	})
}
