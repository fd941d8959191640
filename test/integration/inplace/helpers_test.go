package inplace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	pod, err := readPod(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// readPod is getPod for goroutines other than the test's, where t.Fatal must not be called.
func readPod(ns, name string) (*corev1.Pod, error) {
	pod, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
	}
	return pod, nil
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

// killPoint is where a counting client dies, as if the process that owned it were gone: from
// there on every request fails with errKilled without reaching the apiserver. The zero value
// never dies.
type killPoint struct {
	// afterWrites: once this many pod writes were sent (and landed), every later request fails;
	// the updater dies between two steps.
	afterWrites int
	// atWrite: this pod write (1-based) fails unsent, and every later request: the updater read
	// the pod and decided its next step, and dies before the write lands.
	atWrite int
}

// writeCounter is an http.RoundTripper that counts writes to pods and their status (not
// Events) and fails requests from its kill point on.
type writeCounter struct {
	next   http.RoundTripper
	kill   killPoint
	mu     sync.Mutex
	writes map[string]int // "ns/name" -> count
	total  int
	dead   bool
	// lostWrite is the body of a write that failed unsent, so a test can check it never landed.
	lostWrite []byte
}

var errKilled = errors.New("updater killed")

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	isWrite := req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/pods/")
	w.mu.Lock()
	if !w.dead && (w.kill.afterWrites > 0 && w.total >= w.kill.afterWrites || isWrite && w.total+1 == w.kill.atWrite) {
		w.dead = true
		if isWrite && req.Body != nil {
			w.lostWrite, _ = io.ReadAll(req.Body)
		}
	}
	if w.dead {
		w.mu.Unlock()
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, errKilled
	}
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

// lost returns the body of the write that failed unsent at the kill point, or nil.
func (w *writeCounter) lost() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lostWrite
}

// checkWrites logs how many pod writes the counter saw for the pod and fails the test if there
// were more than most, or none: none means the counter missed the writes, not that the update
// was cheap.
func checkWrites(t *testing.T, counter *writeCounter, ns, name, what string, most int) {
	t.Helper()
	writes := counter.count(ns, name)
	t.Logf("API writes for %s: %d", what, writes)
	if writes > most {
		t.Errorf("%d writes for %s, want at most %d", writes, what, most)
	}
	if writes < 1 {
		t.Errorf("no writes counted for %s: the update cannot have happened without one", what)
	}
}

// countingClient returns a client whose pod writes are counted and that dies at kill. It calls
// t.Fatal, so only the test goroutine may call it; others call newCountingClient.
func countingClient(t *testing.T, kill killPoint) (kubernetes.Interface, *writeCounter) {
	t.Helper()
	client, counter, err := newCountingClient(kill)
	if err != nil {
		t.Fatal(err)
	}
	return client, counter
}

func newCountingClient(kill killPoint) (kubernetes.Interface, *writeCounter, error) {
	counter := &writeCounter{writes: map[string]int{}, kill: kill}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("counting client: %w", err)
	}
	return client, counter, nil
}

// podEvents records the Events of the tests' updaters, on a client of its own as the command's
// (their writes are not counted); made on first use, once env is there.
var podEvents = sync.OnceValue(func() *inplace.EventBroadcaster {
	b, err := inplace.NewEventBroadcaster(env.Client, nil)
	if err != nil {
		panic(fmt.Sprintf("recording Events: %v", err))
	}
	return b
})

func newUpdater(client kubernetes.Interface, opts inplace.Options) *inplace.Updater {
	return &inplace.Updater{Client: client, Options: opts, Events: podEvents().Recorder("inplace-rollout")}
}

// simTagMoved asks the simulator's registry whether a tag still resolves to a digest.
func simTagMoved(image, beforeImageID string) (bool, bool) {
	digest, err := env.Sim.Digest(image)
	if err != nil {
		return false, false
	}
	return !strings.HasSuffix(beforeImageID, "@"+digest), true
}

// eventReasons are the reasons of pod's Events, read as core/v1 Events once those recorded
// so far are written.
func eventReasons(t *testing.T, ns, pod string) []string {
	t.Helper()
	if err := podEvents().Flush(time.Minute); err != nil {
		t.Fatalf("recording events: %v", err)
	}
	list, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}
