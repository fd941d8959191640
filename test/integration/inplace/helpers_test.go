package inplace_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const (
	appV1 = "registry.example/app:v1"
	appV2 = "registry.example/app:v2"
)

// newPod creates a pod with the named containers (the first runs appV1) and waits until it is
// Ready. With gate, it declares the inplace-rollout.io/ready readiness gate and sets it True.
func newPod(t *testing.T, ns, name string, gate bool, containers ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for i, c := range containers {
		image := fmt.Sprintf("registry.example/%s:v1", c)
		if i == 0 {
			image = appV1
		}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: image})
	}
	if gate {
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	if gate {
		env.WaitForPod(t, ns, name, 30*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, inplace.ReadinessGate)
		if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("setting the readiness gate of %s/%s: %v", ns, name, err)
		}
	}
	return env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s/%s: %v", ns, name, err)
	}
	return pod
}

func state(t *testing.T, pod *corev1.Pod) *inplace.State {
	t.Helper()
	st, err := inplace.ReadState(pod)
	if err != nil || st == nil {
		t.Fatalf("pod %s: state %v, err %v", pod.Name, st, err)
	}
	return st
}

// drive calls step until it reports Done, waiting at most 100 ms between calls.
func drive(t *testing.T, what string, step func() (inplace.Result, error)) inplace.Result {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := step()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Done {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after 60s; stage %s: %s", what, res.Stage, res.Reason)
		}
		time.Sleep(min(max(res.RequeueAfter, 10*time.Millisecond), 100*time.Millisecond))
	}
}

// writeCounter is an http.RoundTripper that counts writes to pods and their status (not
// Events) and, once failAfter writes were sent, fails every later request: the process that
// owned the client is gone, whether or not its last write landed.
type writeCounter struct {
	next      http.RoundTripper
	mu        sync.Mutex
	writes    map[string]int // "ns/name" -> count
	total     int
	failAfter int // 0: never
}

var errKilled = errors.New("updater killed")

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	w.mu.Lock()
	if w.failAfter > 0 && w.total >= w.failAfter {
		w.mu.Unlock()
		return nil, errKilled
	}
	isWrite := req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/pods/")
	if isWrite {
		parts := strings.Split(req.URL.Path, "/") // /api/v1/namespaces/NS/pods/NAME[/status]
		for i := range parts {
			if parts[i] == "pods" && i+1 < len(parts) && i >= 1 {
				w.writes[parts[i-1]+"/"+parts[i+1]]++
			}
		}
		w.total++
	}
	w.mu.Unlock()
	return w.next.RoundTrip(req)
}

func (w *writeCounter) count(ns, name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[ns+"/"+name]
}

// countingClient returns a client whose pod writes are counted; failAfter > 0 kills it after
// that many writes.
func countingClient(t *testing.T, failAfter int) (kubernetes.Interface, *writeCounter) {
	t.Helper()
	counter := &writeCounter{writes: map[string]int{}, failAfter: failAfter}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, counter
}

func newUpdater(client kubernetes.Interface, opts inplace.Options) *inplace.Updater {
	return &inplace.Updater{Client: client, Options: opts, Events: inplace.ClientEventRecorder{Client: env.Client}}
}

// simTagMoved asks the simulator's registry whether a tag still resolves to a digest.
func simTagMoved(image, beforeImageID string) (bool, bool) {
	digest, err := env.Sim.Digest(image)
	if err != nil {
		return false, false
	}
	return !strings.HasSuffix(beforeImageID, "@"+digest), true
}

func eventReasons(t *testing.T, ns, pod string) []string {
	t.Helper()
	events, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}
