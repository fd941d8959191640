package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The conformance rows of docs/conformance.md: each behaviour of the kubelet that the engine
// depends on, run on a pod of a simulated node and on a pod of the real node, so that the
// simulator's fast tests keep meaning what the real kubelet does.

// onBoth runs row on a simulated node and on the real node, in parallel.
func onBoth(t *testing.T, row func(t *testing.T, ns, node string)) {
	t.Helper()
	for _, node := range []string{env.Sim.NodeNames()[0], env.RealNode.Name} {
		kind := "simulator"
		if node == env.RealNode.Name {
			kind = "real"
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			row(t, env.Namespace(t), node)
		})
	}
}

// barePod creates a pod of the real app on tag, bound to node, and waits until it is Ready.
func barePod(t *testing.T, ns, node, tag string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: image(tag),
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if mutate != nil {
		mutate(pod)
	}
	_, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	must(t, err, "creating pod %s/app on %s", ns, node)
	wantReady := len(pod.Spec.ReadinessGates) == 0
	return env.WaitForPod(t, ns, "app", 60*time.Second, "running its app container", func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.State.Running != nil && cs.Ready && (!wantReady || cluster.PodReady(p))
	})
}

// setImage patches the app container's image, as the engine does, and returns the pod written.
func setImage(t *testing.T, ns string, tag string) *corev1.Pod {
	t.Helper()
	return setContainerImage(t, ns, "app", image(tag))
}

// setContainerImage patches the image of the pod's container name to ref, and returns the pod
// written.
func setContainerImage(t *testing.T, ns, name, ref string) *corev1.Pod {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"image":%q}]}}`, name, ref)
	p, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "app", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err, "patching container %s of pod %s/app to %s", name, ns, ref)
	return p
}

// pinned is tag's image reference with its digest, as the engine writes it: REPO:TAG@sha256:...
func pinned(t *testing.T, tag string) string {
	t.Helper()
	return image(tag) + "@" + digest(t, tag)
}

// statuses records every version of pod ns/app from now on, as a watch delivers them, until
// the test ends; the returned function gives those seen so far.
func statuses(t *testing.T, ns string) func() []*corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=app"})
	must(t, err, "watching pod %s/app", ns)
	var mu sync.Mutex
	var seen []*corev1.Pod
	closed := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				mu.Lock()
				seen = append(seen, p)
				mu.Unlock()
			}
		}
		mu.Lock()
		closed = true
		mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() []*corev1.Pod {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if closed {
			t.Fatalf("the watch of pod %s/app closed early, after %d versions: some statuses went unseen", ns, len(seen))
		}
		return slices.Clone(seen)
	}
}

// runningOn waits until the app container runs a container of tag's digest, Ready.
func runningOn(t *testing.T, ns, tag string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	d := digest(t, tag)
	return env.WaitForPod(t, ns, "app", timeout, "app running "+tag, func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.State.Running != nil && cs.Ready && strings.HasSuffix(cs.ImageID, "@"+d)
	})
}

func appStatus(p *corev1.Pod) corev1.ContainerStatus {
	if cs := cluster.ContainerStatus(p, "app"); cs != nil {
		return *cs
	}
	return corev1.ContainerStatus{}
}

// An image patch restarts the container in place: same UID and IP, restartCount +1, a new
// containerID, imageID REPO@sha256:<manifest digest>, lastState the container it replaced.
func TestConformanceInPlaceRestart(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		before := barePod(t, ns, node, "v1", nil)
		old := appStatus(before)
		setImage(t, ns, "v2")
		after := runningOn(t, ns, "v2", 60*time.Second)
		cs := appStatus(after)
		repo := strings.TrimSuffix(image("v2"), ":v2")
		switch {
		case after.UID != before.UID || after.Status.PodIP != before.Status.PodIP:
			t.Errorf("pod recreated: UID %s -> %s, IP %s -> %s", before.UID, after.UID, before.Status.PodIP, after.Status.PodIP)
		case cs.RestartCount != old.RestartCount+1:
			t.Errorf("restartCount %d -> %d, want +1", old.RestartCount, cs.RestartCount)
		case cs.ContainerID == old.ContainerID:
			t.Errorf("containerID unchanged: %s", cs.ContainerID)
		case cs.ImageID != repo+"@"+digest(t, "v2"):
			t.Errorf("imageID %s, want %s@%s", cs.ImageID, repo, digest(t, "v2"))
		case cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ContainerID != old.ContainerID:
			t.Errorf("lastState %+v, want terminated container %s", cs.LastTerminationState, old.ContainerID)
		}
	})
}

// The kubelet's crash back-off is keyed by pod, container and image, and every start of a
// container after another one of its name exited counts toward it (kubelet v1.34.5,
// kuberuntime doBackOff): going back, within 10 s of the last exit, to an image started that way
// before meets the back-off although nothing crashed. v1 -> v2 -> v1 -> v2 starts v1 and v2
// without it (v2's first start followed no exit); the next v1 finds v1's entry: CrashLoopBackOff
// "back-off 10s" with the restart count unchanged and lastState the container the patch
// stopped, and v1 starts once the back-off has passed. The simulator's back-off is its BackOff
// (1 s by default), the real one's 10 s scaled down.
func TestConformanceBackOffOnReturn(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		barePod(t, ns, node, "v1", nil)
		for _, tag := range []string{"v2", "v1", "v2"} {
			setImage(t, ns, tag)
			if p := runningWithoutBackOff(t, ns, tag); t.Failed() {
				t.Fatalf("patch to %s met the back-off: %+v", tag, appStatus(p))
			}
		}
		left := appStatus(runningOn(t, ns, "v2", time.Second))
		setImage(t, ns, "v1")
		backOff := env.WaitForPod(t, ns, "app", 30*time.Second, "CrashLoopBackOff of the back-off", func(p *corev1.Pod) bool {
			cs := appStatus(p)
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
		})
		cs := appStatus(backOff)
		want := fmt.Sprintf("back-off %s restarting failed container=app pod=app_%s(%s)", initialBackOff(node), ns, backOff.UID)
		if cs.State.Waiting.Message != want {
			t.Errorf("back-off message %q, want %q", cs.State.Waiting.Message, want)
		}
		if cs.RestartCount != left.RestartCount {
			t.Errorf("restartCount %d during the back-off, want %d as before the patch", cs.RestartCount, left.RestartCount)
		}
		if last := cs.LastTerminationState.Terminated; last == nil || last.ContainerID != left.ContainerID {
			t.Errorf("lastState %+v during the back-off, want the stopped container %s", cs.LastTerminationState, left.ContainerID)
		}
		done := appStatus(runningOn(t, ns, "v1", 60*time.Second))
		if done.RestartCount != left.RestartCount+1 {
			t.Errorf("restartCount %d once v1 runs, want %d", done.RestartCount, left.RestartCount+1)
		}
	})
}

// initialBackOff is the kubelet's first crash back-off on node: 10 s on the real node, the
// simulator's BackOff, which stands for it scaled down, on a simulated one.
func initialBackOff(node string) time.Duration {
	if node == env.RealNode.Name {
		return 10 * time.Second
	}
	return env.Sim.Config().BackOff
}

// runningWithoutBackOff waits until the app runs tag, and fails the test (not at once) if a
// CrashLoopBackOff showed meanwhile.
func runningWithoutBackOff(t *testing.T, ns, tag string) *corev1.Pod {
	t.Helper()
	d := digest(t, tag)
	return env.WaitForPod(t, ns, "app", 60*time.Second, "app running "+tag, func(p *corev1.Pod) bool {
		cs := appStatus(p)
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
			t.Errorf("CrashLoopBackOff on the way to %s: %s", tag, cs.State.Waiting.Message)
			return true
		}
		return cs.State.Running != nil && cs.Ready && strings.HasSuffix(cs.ImageID, "@"+d)
	})
}

// A tag that does not exist stops the old container before the pull fails: the status keeps
// the old containerID and restart count, shows no running container, ErrImagePull naming the
// missing manifest, then ImagePullBackOff.
func TestConformanceMissingTag(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		old := appStatus(barePod(t, ns, node, "v1", nil))
		setImage(t, ns, "missing1")
		var reasons []string
		p := env.WaitForPod(t, ns, "app", 90*time.Second, "ImagePullBackOff", func(p *corev1.Pod) bool {
			cs := appStatus(p)
			if w := cs.State.Waiting; w != nil && (len(reasons) == 0 || reasons[len(reasons)-1] != w.Reason) {
				reasons = append(reasons, w.Reason)
			}
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ImagePullBackOff"
		})
		cs := appStatus(p)
		if reasons[0] != "ErrImagePull" {
			t.Errorf("waiting reasons %v, want ErrImagePull first", reasons)
		}
		if cs.ContainerID != old.ContainerID || cs.RestartCount != old.RestartCount || cs.State.Running != nil {
			t.Errorf("status %+v, want the old container %s, restartCount %d, nothing running", cs, old.ContainerID, old.RestartCount)
		}
		if !strings.Contains(cs.State.Waiting.Message, image("missing1")) || !strings.Contains(cs.State.Waiting.Message, "not found") {
			t.Errorf("ImagePullBackOff message %q names neither %s nor \"not found\"", cs.State.Waiting.Message, image("missing1"))
		}
	})
}

// A crashing image in place: the container exits 1 (reason Error) and the kubelet backs off
// (CrashLoopBackOff) once the restart count has climbed.
func TestConformanceCrash(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		old := appStatus(barePod(t, ns, node, "v1", nil))
		setImage(t, ns, "crash1")
		p := env.WaitForPod(t, ns, "app", 60*time.Second, "CrashLoopBackOff", func(p *corev1.Pod) bool {
			cs := appStatus(p)
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" && cs.RestartCount > old.RestartCount
		})
		cs := appStatus(p)
		last := cs.LastTerminationState.Terminated
		if last == nil || last.ExitCode != 1 || last.Reason != "Error" {
			t.Errorf("lastState %+v, want terminated with exit code 1, reason Error", cs.LastTerminationState)
		}
		if !strings.HasSuffix(cs.ImageID, "@"+digest(t, "crash1")) {
			t.Errorf("imageID %s, want crash1's digest %s", cs.ImageID, digest(t, "crash1"))
		}
	})
}

// A readiness gate holds the pod not Ready (ReadinessGatesNotReady) while its condition is
// False, and the condition survives the container's in-place restart.
func TestConformanceReadinessGate(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		barePod(t, ns, node, "v1", func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
		})
		setGate(t, ns, corev1.ConditionTrue)
		env.WaitForPod(t, ns, "app", 30*time.Second, "Ready with the gate True", cluster.PodReady)
		setGate(t, ns, corev1.ConditionFalse)
		p := env.WaitForPod(t, ns, "app", 30*time.Second, "not Ready with the gate False", func(p *corev1.Pod) bool { return !cluster.PodReady(p) })
		if r := readyReason(p); r != "ReadinessGatesNotReady" {
			t.Errorf("Ready condition reason %q, want ReadinessGatesNotReady", r)
		}
		setImage(t, ns, "v2")
		p = runningOn(t, ns, "v2", 60*time.Second)
		if gate := condition(p, inplace.ReadinessGate); gate == nil || gate.Status != corev1.ConditionFalse {
			t.Errorf("gate condition after the restart: %+v, want False", gate)
		}
		if cluster.PodReady(p) {
			t.Error("pod Ready after the restart with its gate False")
		}
	})
}

// A condition of another party's (a handshake hook's, which no readinessGate names) set False
// through pods/status stays as written through the kubelet's status writes of an in-place
// restart of the container, and does not keep the pod from being Ready.
func TestConformanceHandshakeCondition(t *testing.T) {
	const registered corev1.PodConditionType = "example.com/registered"
	onBoth(t, func(t *testing.T, ns, node string) {
		barePod(t, ns, node, "v1", nil)
		env.WaitForPod(t, ns, "app", 30*time.Second, "Ready", cluster.PodReady)
		setCondition := func(status corev1.ConditionStatus, reason string) {
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
				Type: registered, Status: status, Reason: reason, LastTransitionTime: metav1.Now(),
			}}}})
			_, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			must(t, err, "setting condition %s of %s/app %s", registered, ns, status)
		}
		setCondition(corev1.ConditionFalse, "PreUpdate")
		setImage(t, ns, "v2")
		runningOn(t, ns, "v2", 60*time.Second)
		p := env.WaitForPod(t, ns, "app", 30*time.Second, "Ready on v2", func(p *corev1.Pod) bool { return cluster.PodReady(p) && appStatus(p).Ready })
		if c := condition(p, registered); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PreUpdate" {
			t.Errorf("condition %s after the restart: %+v, want False with reason PreUpdate", registered, c)
		}
	})
}

// After an image patch the status's observedGeneration reaches the pod's generation.
func TestConformanceObservedGeneration(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		barePod(t, ns, node, "v1", nil)
		setImage(t, ns, "v2")
		p := runningOn(t, ns, "v2", 60*time.Second)
		if p.Status.ObservedGeneration != p.Generation {
			t.Errorf("status.observedGeneration %d, pod generation %d", p.Status.ObservedGeneration, p.Generation)
		}
	})
}

func setGate(t *testing.T, ns string, status corev1.ConditionStatus) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: inplace.ReadinessGate, Status: status, LastTransitionTime: metav1.Now(),
	}}}})
	_, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	must(t, err, "setting the readiness gate of %s/app %s", ns, status)
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func readyReason(p *corev1.Pod) string {
	if c := condition(p, corev1.PodReady); c != nil {
		return c.Reason
	}
	return ""
}

// An image patched back while the kubelet still stops the container for the first patch: the
// kubelet kills the container and starts the image of the patch it acted on in one sync, and
// only its next sync sees the image patched back. So the container restarts twice, first into
// the patched image and then into the first one again, never once straight back. The preStop
// sleep holds the stop open long enough for the second patch to land in it; the simulator
// stops a container for its preStop sleep too.
func TestConformancePatchedBackDuringStop(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		old := appStatus(barePod(t, ns, node, "v1", func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}
		}))
		seen := statuses(t, ns)
		setImage(t, ns, "v2")
		time.Sleep(time.Second)
		if cs := appStatus(getPod(t, ns)); cs.ContainerID != old.ContainerID {
			t.Fatalf("container %s replaced within a second of the patch, before its 3 s preStop sleep ended", cs.ContainerID)
		}
		back := setImage(t, ns, "v1")
		d := digest(t, "v1")
		p := env.WaitForPod(t, ns, "app", 90*time.Second, "app running v1 in a new container", func(p *corev1.Pod) bool {
			cs := appStatus(p)
			return cs.State.Running != nil && cs.Ready && cs.ContainerID != old.ContainerID && strings.HasSuffix(cs.ImageID, "@"+d)
		})
		cs := appStatus(p)
		if cs.RestartCount != old.RestartCount+2 {
			t.Errorf("restartCount %d -> %d, want +2 (into v2, then back into v1)", old.RestartCount, cs.RestartCount)
		}
		if last := cs.LastTerminationState.Terminated; last == nil || last.ContainerID == old.ContainerID {
			t.Errorf("lastState %+v, want the v2 container, not the first one %s", cs.LastTerminationState, old.ContainerID)
		}
		// The sync that stops the first container read generation 2; the patch back's
		// generation is reported only by a later sync, once the v2 container started.
		for _, p := range seen() {
			if appStatus(p).ContainerID == old.ContainerID && p.Status.ObservedGeneration >= back.Generation {
				t.Errorf("a status names the first container %s with observedGeneration %d, the patch back's (%d): want the generation the stopping sync read", old.ContainerID, p.Status.ObservedGeneration, back.Generation)
				break
			}
		}
	})
}

// An image patched, and patched back, while the kubelet's sync of the pod stops another
// container (its 3 s preStop sleep holds the sync open): the kubelet's next sync reads only the
// newest spec, whose image the container already runs, so the container is never restarted;
// the status reports the patch back's generation once that sync ran, with the same container,
// whose image is the reference it was started from, pinned as the engine writes it. The
// simulator syncs a pod one spec at a time too.
func TestConformancePatchedBackWhileTheSyncStopsAnother(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		v1 := pinned(t, "v1")
		pod := barePod(t, ns, node, "v1", func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
			p.Spec.Containers[0].Image = v1
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
				Name:      "side",
				Image:     image("v1"),
				Env:       []corev1.EnvVar{{Name: "APP_LISTEN", Value: ":8081"}},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}},
			})
		})
		old := appStatus(pod)
		side := *cluster.ContainerStatus(pod, "side")
		seen := statuses(t, ns)
		sidePatch := setContainerImage(t, ns, "side", image("v2"))
		// The sync that stops side has begun once the status reports its generation.
		env.WaitForPod(t, ns, "app", 30*time.Second, "the sync of side's patch begun", func(p *corev1.Pod) bool {
			return p.Status.ObservedGeneration >= sidePatch.Generation
		})
		setContainerImage(t, ns, "app", pinned(t, "v2"))
		back := setContainerImage(t, ns, "app", v1)
		if p := getPod(t, ns); cluster.ContainerStatus(p, "side").ContainerID != side.ContainerID {
			t.Fatalf("side replaced before the app's patches were written, within its 3 s preStop sleep: %+v", cluster.ContainerStatus(p, "side"))
		}
		env.WaitForPod(t, ns, "app", 90*time.Second, "side running v2, observedGeneration of the patch back", func(p *corev1.Pod) bool {
			cs := cluster.ContainerStatus(p, "side")
			return cs != nil && cs.State.Running != nil && cs.ContainerID != side.ContainerID && p.Status.ObservedGeneration >= back.Generation
		})
		// A sync that would restart the app would have begun by now; give it the time it takes
		// to show a new container.
		time.Sleep(3 * time.Second)
		p := getPod(t, ns)
		cs := appStatus(p)
		if cs.ContainerID != old.ContainerID || cs.RestartCount != old.RestartCount || cs.State.Running == nil || !cs.Ready {
			t.Errorf("app container %s, restartCount %d, running %v, ready %v; want the first one %s untouched, restartCount %d",
				cs.ContainerID, cs.RestartCount, cs.State.Running != nil, cs.Ready, old.ContainerID, old.RestartCount)
		}
		// containerd 1.6 names a container started from a pinned reference by the image's first
		// tag on the node, when it has one; the simulator by the reference.
		if cs.Image != old.Image || inplace.DigestOf(cs.ImageID) != inplace.DigestOf(v1) {
			t.Errorf("app status image %q (%s), want %q (%s) as the first container reported", cs.Image, cs.ImageID, old.Image, inplace.DigestOf(v1))
		}
		if p.Status.ObservedGeneration != back.Generation {
			t.Errorf("observedGeneration %d, want the patch back's %d", p.Status.ObservedGeneration, back.Generation)
		}
		for _, p := range seen() {
			if cs := cluster.ContainerStatus(p, "side"); cs != nil && cs.ContainerID == side.ContainerID && p.Status.ObservedGeneration >= back.Generation {
				t.Errorf("a status names side's first container %s with observedGeneration %d, the patch back's (%d): want the generation of the sync that stops it", side.ContainerID, p.Status.ObservedGeneration, back.Generation)
				break
			}
		}
	})
}

func getPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
	must(t, err, "reading pod %s/app", ns)
	return p
}

// guaranteed is cpu and memory as both the requests and the limits.
func guaranteed(cpu, memory string) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

// resizePolicy is the app container's resizePolicy: NotRequired for cpu and memory, but
// RestartContainer for those in restart.
func resizePolicy(restart ...corev1.ResourceName) []corev1.ContainerResizePolicy {
	var out []corev1.ContainerResizePolicy
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		policy := corev1.NotRequired
		if slices.Contains(restart, r) {
			policy = corev1.RestartContainer
		}
		out = append(out, corev1.ContainerResizePolicy{ResourceName: r, RestartPolicy: policy})
	}
	return out
}

// resizedPod creates the app pod with res as its resources and the resizePolicy restart gives,
// and waits until it is Ready.
func resizedPod(t *testing.T, ns, node string, res corev1.ResourceRequirements, restart ...corev1.ResourceName) *corev1.Pod {
	t.Helper()
	return barePod(t, ns, node, "v1", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = res
		p.Spec.Containers[0].ResizePolicy = resizePolicy(restart...)
	})
}

// resize writes res as the resources of the app container through the pods/resize
// subresource, with a strategic-merge patch as kubectl patch --subresource resize does, and
// returns the pod written.
func resize(t *testing.T, ns string, res corev1.ResourceRequirements) *corev1.Pod {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "resources": res}}}})
	must(t, err, "encoding the resize")
	p, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "app", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize")
	must(t, err, "resizing pod %s/app", ns)
	return p
}

// equalResources reports whether a and b have the same cpu and memory requests and limits.
func equalResources(a, b corev1.ResourceRequirements) bool {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if a.Requests.Name(name, resource.DecimalSI).Cmp(*b.Requests.Name(name, resource.DecimalSI)) != 0 ||
			a.Limits.Name(name, resource.DecimalSI).Cmp(*b.Limits.Name(name, resource.DecimalSI)) != 0 {
			return false
		}
	}
	return true
}

// reports reports whether the container status reports res as its resources.
func reports(cs corev1.ContainerStatus, res corev1.ResourceRequirements) bool {
	return cs.Resources != nil && equalResources(*cs.Resources, res)
}

func describeResources(cs corev1.ContainerStatus) string {
	if cs.Resources == nil {
		return "none"
	}
	return fmt.Sprintf("requests %s/%s limits %s/%s", cs.Resources.Requests.Cpu(), cs.Resources.Requests.Memory(), cs.Resources.Limits.Cpu(), cs.Resources.Limits.Memory())
}

// A cpu resize with resizePolicy NotRequired goes into the running container: the same UID,
// containerID and restartCount in every status, and containerStatuses[].resources reports the
// new cpu once it is done; observedGeneration does not say so. Whether PodResizeInProgress was
// seen on the way is logged, not asserted: on the real node it lasts under a second.
func TestConformanceResizeWithoutRestart(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		before := resizedPod(t, ns, node, guaranteed("100m", "64Mi"))
		old := appStatus(before)
		if !reports(old, guaranteed("100m", "64Mi")) {
			t.Fatalf("status resources %s before the resize, want the spec's", describeResources(old))
		}
		seen := statuses(t, ns)
		want := guaranteed("200m", "64Mi")
		start := time.Now()
		written := resize(t, ns, want)
		p := env.WaitForPod(t, ns, "app", 60*time.Second, "status resources of cpu 200m", func(p *corev1.Pod) bool {
			return reports(appStatus(p), want)
		})
		took := time.Since(start)
		cs := appStatus(p)
		if p.UID != before.UID || cs.ContainerID != old.ContainerID || cs.RestartCount != old.RestartCount || cs.State.Running == nil {
			t.Errorf("pod %s, container %s, restartCount %d, running %v after the resize; want %s, %s, %d, running",
				p.UID, cs.ContainerID, cs.RestartCount, cs.State.Running != nil, before.UID, old.ContainerID, old.RestartCount)
		}
		inProgress, generationFirst := false, false
		for _, v := range seen() {
			if id := appStatus(v).ContainerID; id != old.ContainerID {
				t.Errorf("a status names container %s, not %s: the resize restarted it", id, old.ContainerID)
				break
			}
			if condition(v, corev1.PodResizeInProgress) != nil {
				inProgress = true
			}
			if v.Status.ObservedGeneration >= written.Generation && !reports(appStatus(v), want) {
				generationFirst = true
			}
		}
		t.Logf("status resources matched %s after the resize; PodResizeInProgress seen: %v; observedGeneration %d reported before the resources: %v",
			took.Round(10*time.Millisecond), inProgress, written.Generation, generationFirst)
	})
}

// A memory resize with resizePolicy RestartContainer for memory restarts the container once, in
// place: the same UID, restartCount +1, a new containerID whose lastState is the old one, and
// status resources of the new memory.
func TestConformanceResizeRestartContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		before := resizedPod(t, ns, node, guaranteed("100m", "64Mi"), corev1.ResourceMemory)
		old := appStatus(before)
		want := guaranteed("100m", "96Mi")
		start := time.Now()
		resize(t, ns, want)
		p := env.WaitForPod(t, ns, "app", 60*time.Second, "app restarted with memory 96Mi", func(p *corev1.Pod) bool {
			cs := appStatus(p)
			return cs.ContainerID != old.ContainerID && cs.State.Running != nil && cs.Ready && reports(cs, want)
		})
		took := time.Since(start)
		cs := appStatus(p)
		switch {
		case p.UID != before.UID:
			t.Errorf("pod recreated: UID %s -> %s", before.UID, p.UID)
		case cs.RestartCount != old.RestartCount+1:
			t.Errorf("restartCount %d -> %d, want +1", old.RestartCount, cs.RestartCount)
		case cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ContainerID != old.ContainerID:
			t.Errorf("lastState %+v, want terminated container %s", cs.LastTerminationState, old.ContainerID)
		}
		t.Logf("restarted with %s %s after the resize, restartCount %d", describeResources(cs), took.Round(10*time.Millisecond), cs.RestartCount)
	})
}

// A cpu request above the node's allocatable is not carried out: PodResizePending True, reason
// Infeasible, "Node didn't have enough capacity: cpu, requested: 500000, capacity: C" (C the
// node's allocatable millicores), and it stays so; the spec keeps what was asked, the status
// the resources the container runs with, and the container is not restarted. A later resize
// that fits clears the condition and goes into the same container.
func TestConformanceResizeInfeasible(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		before := resizedPod(t, ns, node, guaranteed("100m", "64Mi"))
		old := appStatus(before)
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		must(t, err, "reading node %s", node)
		asked := guaranteed("500", "64Mi")
		start := time.Now()
		written := resize(t, ns, asked)
		p := env.WaitForPod(t, ns, "app", 60*time.Second, "PodResizePending", func(p *corev1.Pod) bool {
			return condition(p, corev1.PodResizePending) != nil
		})
		took := time.Since(start)
		c := condition(p, corev1.PodResizePending)
		msg := fmt.Sprintf("Node didn't have enough capacity: cpu, requested: 500000, capacity: %d", n.Status.Allocatable.Cpu().MilliValue())
		if c.Status != corev1.ConditionTrue || c.Reason != corev1.PodReasonInfeasible || c.Message != msg || c.ObservedGeneration != written.Generation {
			t.Errorf("PodResizePending %s %s %q (generation %d), want True %s %q (generation %d)",
				c.Status, c.Reason, c.Message, c.ObservedGeneration, corev1.PodReasonInfeasible, msg, written.Generation)
		}
		t.Logf("PodResizePending %s %q %s after the resize", c.Reason, c.Message, took.Round(10*time.Millisecond))
		// The kubelet judges the resize again on each sync of the pod; the answer stays.
		time.Sleep(3 * time.Second)
		p = getPod(t, ns)
		cs := appStatus(p)
		if c := condition(p, corev1.PodResizePending); c == nil || c.Reason != corev1.PodReasonInfeasible {
			t.Errorf("PodResizePending %+v 3 s later, want it still Infeasible", c)
		}
		if !equalResources(p.Spec.Containers[0].Resources, asked) {
			t.Errorf("spec resources %+v, want those asked", p.Spec.Containers[0].Resources)
		}
		if !reports(cs, guaranteed("100m", "64Mi")) {
			t.Errorf("status resources %s, want the ones the container runs with, cpu 100m", describeResources(cs))
		}
		if cs.ContainerID != old.ContainerID || cs.RestartCount != old.RestartCount {
			t.Errorf("container %s, restartCount %d; want %s, %d", cs.ContainerID, cs.RestartCount, old.ContainerID, old.RestartCount)
		}

		fits := guaranteed("200m", "64Mi")
		start = time.Now()
		resize(t, ns, fits)
		p = env.WaitForPod(t, ns, "app", 60*time.Second, "the resize that fits applied, PodResizePending gone", func(p *corev1.Pod) bool {
			return condition(p, corev1.PodResizePending) == nil && reports(appStatus(p), fits)
		})
		took = time.Since(start)
		if cs := appStatus(p); cs.ContainerID != old.ContainerID || cs.RestartCount != old.RestartCount {
			t.Errorf("container %s, restartCount %d after the resize that fits; want %s, %d", cs.ContainerID, cs.RestartCount, old.ContainerID, old.RestartCount)
		}
		t.Logf("the resize that fits cleared PodResizePending and applied %s after it", took.Round(10*time.Millisecond))
	})
}

// initStatus is the status of the pod's init container name.
func initStatus(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

// An image patch of a native sidecar (an init container with restartPolicy Always, here the
// real app on port 8081 with no probe) restarts it in place: restartCount +1, a new
// containerID, the new image's digest; the app container keeps its containerID and
// restartCount, and no status reports the pod not Ready.
func TestConformanceNativeSidecarImage(t *testing.T) {
	onBoth(t, func(t *testing.T, ns, node string) {
		before := barePod(t, ns, node, "v1", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{
				Name: "side", Image: image("v1"), Args: []string{"-listen=:8081"},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			}}
		})
		old, side := appStatus(before), initStatus(before, "side")
		seen := statuses(t, ns)
		patch := fmt.Sprintf(`{"spec":{"initContainers":[{"name":"side","image":%q}]}}`, image("v2"))
		_, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "app", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		must(t, err, "patching the image of sidecar side of pod %s/app", ns)
		d := digest(t, "v2")
		p := env.WaitForPod(t, ns, "app", 60*time.Second, "sidecar running v2", func(p *corev1.Pod) bool {
			cs := initStatus(p, "side")
			return cs.State.Running != nil && cs.Ready && cs.ContainerID != side.ContainerID && strings.HasSuffix(cs.ImageID, "@"+d)
		})
		cs, app := initStatus(p, "side"), appStatus(p)
		if cs.RestartCount != side.RestartCount+1 {
			t.Errorf("sidecar restartCount %d -> %d, want +1", side.RestartCount, cs.RestartCount)
		}
		if p.UID != before.UID || app.ContainerID != old.ContainerID || app.RestartCount != old.RestartCount {
			t.Errorf("pod %s, app container %s, restartCount %d; want %s, %s, %d untouched", p.UID, app.ContainerID, app.RestartCount, before.UID, old.ContainerID, old.RestartCount)
		}
		versions := seen()
		for _, v := range versions {
			if !cluster.PodReady(v) {
				t.Errorf("a status reports the pod not Ready (%s) while its sidecar restarted: sidecar %+v", readyReason(v), initStatus(v, "side").State)
				break
			}
		}
		t.Logf("sidecar restartCount %d, app restartCount %d, %d statuses watched", cs.RestartCount, app.RestartCount, len(versions))
	})
}
