package kubeletsim

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func TestPodIPIndexInvertsPodIP(t *testing.T) {
	for node := range 3 {
		for n := 1; n <= 1000; n++ {
			got, ok := podIPIndex(node, podIP(node, n))
			if !ok || got != n {
				t.Fatalf("podIPIndex(%d, %s) = %d, %v; want %d, true", node, podIP(node, n), got, ok, n)
			}
		}
	}
	tests := []struct {
		name string
		node int
		ip   string
	}{
		{"another node's range", 1, "10.100.0.2"},
		{"not 10/8", 0, "192.168.0.2"},
		{"last octet 0", 0, "10.100.1.0"},
		{"last octet past 250", 0, "10.100.0.251"},
		{"IPv6", 0, "fd00::2"},
		{"empty", 0, ""},
		{"not an IP", 0, "pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n, ok := podIPIndex(tt.node, tt.ip); ok {
				t.Errorf("podIPIndex(%d, %q) = %d, true; want false", tt.node, tt.ip, n)
			}
		})
	}
}

// podOn is a pod bound to node that a simulator reported ip for.
func podOn(name, node, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

func TestSeedPodIPs(t *testing.T) {
	tests := []struct {
		name string
		pods []*corev1.Pod
		want []string // the next IP handed out on each node
	}{
		{"no pods", nil, []string{"10.100.0.2", "10.101.0.2"}},
		{
			"adopted pods on one node",
			[]*corev1.Pod{podOn("a", "sim-node-0", "10.100.0.4"), podOn("b", "sim-node-0", "10.100.0.2")},
			[]string{"10.100.0.5", "10.101.0.2"},
		},
		{
			"adopted pods on both nodes, past a /24",
			[]*corev1.Pod{podOn("a", "sim-node-0", "10.100.1.1"), podOn("b", "sim-node-1", "10.101.0.3")},
			[]string{"10.100.1.2", "10.101.0.4"},
		},
		{
			"pods of other nodes, without an IP, or outside the node's range are ignored",
			[]*corev1.Pod{
				podOn("other-kubelet", "other-node-0", "10.100.0.9"),
				podOn("unscheduled", "", "10.100.0.9"),
				podOn("pending", "sim-node-0", ""),
				podOn("foreign-ip", "sim-node-1", "10.100.0.7"),
			},
			[]string{"10.100.0.2", "10.101.0.2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(nil, Config{Nodes: 2, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
			if err != nil {
				t.Fatal(err)
			}
			s.seedPodIPs(tt.pods)
			for node, want := range tt.want {
				if got := s.allocatePodIP(node); got != want {
					t.Errorf("next IP on %s = %s, want %s", s.nodes[node], got, want)
				}
			}
		})
	}
}

// TestStartSeedsPodIPsFromAdoptedPods starts a simulator against a fake apiserver that already
// holds pods of a previous simulator, as after a restart.
func TestStartSeedsPodIPsFromAdoptedPods(t *testing.T) {
	client := fake.NewClientset([]runtime.Object{
		podOn("a", "sim-node-0", "10.100.0.2"),
		podOn("b", "sim-node-0", "10.100.0.3"),
		podOn("c", "sim-node-1", "10.101.0.2"),
	}...)
	s, err := New(client, Config{Nodes: 2, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	if err := s.Start(ctx); err != nil {
		t.Fatalf("starting the simulator: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, want := range []string{"10.100.0.4", "10.101.0.3"} {
		if got := s.allocatePodIP(node); got != want {
			t.Errorf("next IP on %s = %s, want %s: a new pod would reuse an adopted pod's IP", s.nodes[node], got, want)
		}
	}
}

// TestSyncReportsObservedGeneration: the status says which spec generation it describes, as a
// v1.34 kubelet's does, and follows a spec change.
func TestSyncReportsObservedGeneration(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := podOn("web-0", "sim-node-0", "")
	tests := []struct {
		name       string
		generation int64
		image      string
	}{
		{"first status", 1, "registry.example/app:v1"},
		{"after an image patch", 2, "registry.example/app:v2"},
		{"a later generation", 5, "registry.example/app:v3"},
	}
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	reg := &registry{}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod.Generation = tt.generation
			pod.Spec.Containers[0].Image = tt.image
			status, _ := p.sync(pod, t0.Add(time.Duration(i)*time.Second), testTimings, reg)
			if status.ObservedGeneration != tt.generation {
				t.Errorf("status.observedGeneration = %d; want %d", status.ObservedGeneration, tt.generation)
			}
		})
	}
}

// TestNewPodWaitsForItsSandbox: a new pod stays Pending with its containers in ContainerCreating
// until its sandbox is set up, then pulls and starts; an image changed in place later does not
// wait for a sandbox again.
func TestNewPodWaitsForItsSandbox(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm := testTimings
	tm.sandbox = 3 * time.Second
	pod := podOn("web-0", "sim-node-0", "")
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	p.sandboxReady = t0.Add(tm.sandbox)
	reg := &registry{}

	status, next := p.sync(pod, t0, tm, reg)
	if status.Phase != corev1.PodPending || !next.Equal(p.sandboxReady) {
		t.Fatalf("at creation: phase %s, next sync %v; want Pending until %v", status.Phase, next, p.sandboxReady)
	}
	if w := status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Fatalf("at creation: container state %+v; want waiting in ContainerCreating", status.ContainerStatuses[0].State)
	}

	// The simulator syncs the pod again when the sandbox is ready: the pull starts then.
	if _, next = p.sync(pod, p.sandboxReady, tm, reg); next.IsZero() {
		t.Fatal("once the sandbox is ready: no next sync; want one when the pull ends")
	}
	readyAt := p.sandboxReady.Add(tm.pull + tm.start)
	status, _ = p.sync(pod, readyAt.Add(-time.Millisecond), tm, reg)
	if conditionTrue(status.Conditions, corev1.PodReady) {
		t.Fatalf("Ready at %v, before sandbox, pull and start were done (%v)", readyAt.Add(-time.Millisecond), readyAt)
	}
	status, _ = p.sync(pod, readyAt, tm, reg)
	if status.Phase != corev1.PodRunning || !conditionTrue(status.Conditions, corev1.PodReady) {
		t.Fatalf("after sandbox, pull and start: phase %s, Ready %v; want Running and Ready", status.Phase, conditionTrue(status.Conditions, corev1.PodReady))
	}

	pod.Spec.Containers[0].Image = "registry.example/app:v2"
	changed := readyAt.Add(time.Second)
	p.sync(pod, changed, tm, reg)
	status, _ = p.sync(pod, changed.Add(tm.pull+tm.start), tm, reg)
	if !conditionTrue(status.Conditions, corev1.PodReady) || status.ContainerStatuses[0].RestartCount != 1 {
		t.Fatalf("an image changed in place: Ready %v, restartCount %d; want Ready after pull and start alone, restartCount 1",
			conditionTrue(status.Conditions, corev1.PodReady), status.ContainerStatuses[0].RestartCount)
	}
}

// TestStatusRightAfterAnImagePatch: as kubelet v1.34.5 did, the status moves to the patched
// generation at once, while it still reports the replaced container Running and Ready, and the
// pod Ready, until the stop delay ends.
func TestStatusRightAfterAnImagePatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm := testTimings
	tm.stop = time.Second
	pod := podOn("web-0", "sim-node-0", "")
	pod.Generation = 1
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	reg := &registry{}
	status, _ := p.sync(pod, t0, tm, reg)
	pod.Status = status
	status, _ = p.sync(pod, t0.Add(time.Second), tm, reg)
	before := status.ContainerStatuses[0]
	pod.Status = status
	if !before.Ready || !conditionTrue(status.Conditions, corev1.PodReady) {
		t.Fatalf("before the patch: %+v", status)
	}

	pod.Generation, pod.Spec.Containers[0].Image = 2, "registry.example/app:v2"
	status, next := p.sync(pod, t0.Add(2*time.Second), tm, reg)
	cs := status.ContainerStatuses[0]
	if status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration = %d, want 2 at once", status.ObservedGeneration)
	}
	if cs.ContainerID != before.ContainerID || cs.Image != before.Image || cs.State.Running == nil || !cs.Ready || !conditionTrue(status.Conditions, corev1.PodReady) {
		t.Errorf("right after the patch: %+v, pod Ready %v; want the old container Running and Ready", cs, conditionTrue(status.Conditions, corev1.PodReady))
	}
	if want := t0.Add(3 * time.Second); !next.Equal(want) {
		t.Errorf("next change at %s, want the end of the stop delay %s", next, want)
	}
	pod.Status = status
	status, _ = p.sync(pod, t0.Add(3*time.Second), tm, reg)
	if cs := status.ContainerStatuses[0]; cs.State.Terminated == nil || cs.Ready || conditionTrue(status.Conditions, corev1.PodReady) {
		t.Errorf("after the stop delay: %+v; want the old container stopped, the pod not Ready", cs)
	}
}

// TestSyncHoldsANewerSpec: the kubelet syncs a pod in one worker, with the spec it read when the
// sync began. A container's image patched and patched back while the pod's sync stops another
// container is never restarted, and the status keeps the generation that sync read until it
// ended; a container patched back while its own stop runs restarts twice, and the status never
// names the generation of the patch back with the container from before the first patch.
func TestSyncHoldsANewerSpec(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm := testTimings
	tm.stop = time.Second
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	preStop3s := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}
	type point struct {
		at         time.Time
		app, side  string // the spec images; side "" for a pod without it
		generation int64
		// want
		appInstance  string // "same" as the first app container the status names, or "new"
		appRestarts  int32
		sideRestarts int32
		observed     int64
	}
	tests := []struct {
		name   string
		points []point
	}{
		{"patched and patched back while the pod's sync stops another container", []point{
			{at: sec(0), app: "v1", side: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(0.5), app: "v1", side: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(1), app: "v1", side: "v2", generation: 2, appInstance: "same", observed: 2},
			{at: sec(1.5), app: "v2", side: "v2", generation: 3, appInstance: "same", observed: 2},
			{at: sec(2), app: "v1", side: "v2", generation: 4, appInstance: "same", observed: 2},
			{at: sec(3.9), app: "v1", side: "v2", generation: 4, appInstance: "same", observed: 2},
			// side stopped at 4 s, pulled and started v2 at 4.2 s: the sync ended.
			{at: sec(4.3), app: "v1", side: "v2", generation: 4, appInstance: "same", sideRestarts: 1, observed: 4},
			{at: sec(10), app: "v1", side: "v2", generation: 4, appInstance: "same", sideRestarts: 1, observed: 4},
		}},
		{"patched while the pod's sync stops another container", []point{
			{at: sec(0), app: "v1", side: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(0.5), app: "v1", side: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(1), app: "v1", side: "v2", generation: 2, appInstance: "same", observed: 2},
			{at: sec(1.5), app: "v2", side: "v2", generation: 3, appInstance: "same", observed: 2},
			// The sync ended at 4.2 s; the next one stops app until 5.2 s and starts v2 at 5.4 s.
			{at: sec(4.3), app: "v2", side: "v2", generation: 3, appInstance: "same", sideRestarts: 1, observed: 3},
			{at: sec(5.5), app: "v2", side: "v2", generation: 3, appInstance: "new", appRestarts: 1, sideRestarts: 1, observed: 3},
		}},
		{"patched back while its own stop runs", []point{
			{at: sec(0), app: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(0.5), app: "v1", generation: 1, appInstance: "same", observed: 1},
			{at: sec(1), app: "v2", generation: 2, appInstance: "same", observed: 2},
			{at: sec(1.5), app: "v1", generation: 3, appInstance: "same", observed: 2},
			// v2 started at 2.2 s, the sync ended: the next one stops v2 until 3.2 s and starts v1 at 3.4 s.
			{at: sec(2.5), app: "v1", generation: 3, appInstance: "new", appRestarts: 1, observed: 3},
			{at: sec(3.7), app: "v1", generation: 3, appInstance: "new", appRestarts: 2, observed: 3},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podOn("web-0", "sim-node-0", "")
			p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
			reg := &registry{}
			var first string
			for _, pt := range tt.points {
				pod.Generation = pt.generation
				pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:" + pt.app}}
				if pt.side != "" {
					pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "side", Image: "registry.example/side:" + pt.side, Lifecycle: preStop3s})
				}
				status, _ := p.sync(pod, pt.at, tm, reg)
				pod.Status = status
				app := status.ContainerStatuses[0]
				if first == "" {
					first = app.ContainerID
				}
				if same := app.ContainerID == first; same != (pt.appInstance == "same") {
					t.Errorf("at %s: app container %s, the first %s; want %s", pt.at.Sub(t0), app.ContainerID, first, pt.appInstance)
				}
				if app.RestartCount != pt.appRestarts {
					t.Errorf("at %s: app restartCount %d, want %d", pt.at.Sub(t0), app.RestartCount, pt.appRestarts)
				}
				if pt.side != "" && status.ContainerStatuses[1].RestartCount != pt.sideRestarts {
					t.Errorf("at %s: side restartCount %d, want %d", pt.at.Sub(t0), status.ContainerStatuses[1].RestartCount, pt.sideRestarts)
				}
				if status.ObservedGeneration != pt.observed {
					t.Errorf("at %s: observedGeneration %d, want %d", pt.at.Sub(t0), status.ObservedGeneration, pt.observed)
				}
			}
		})
	}
}

// TestServing: a pod serves while its container runs Ready; it stops at once when the
// simulator sees its image change, though the status it reports stays Ready through the stop
// delay, and serves again once the new container is Ready; a pod the simulator does not run
// serves nothing.
func TestServing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm := testTimings
	tm.stop = time.Second
	pod := podOn("web-0", "sim-node-0", "")
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	s := &Simulator{pods: map[k8stypes.UID]*podSim{pod.UID: p}}
	reg := &registry{}
	steps := []struct {
		at      time.Duration
		image   string
		serving bool
	}{
		{0, "registry.example/app:v1", false},               // pulling
		{time.Second, "registry.example/app:v1", true},      // Ready
		{2 * time.Second, "registry.example/app:v2", false}, // stopping, still reported Ready
		{3 * time.Second, "registry.example/app:v2", false}, // pulling v2
		{5 * time.Second, "registry.example/app:v2", true},  // v2 Ready
	}
	for _, step := range steps {
		pod.Spec.Containers[0].Image = step.image
		status, _ := p.sync(pod, t0.Add(step.at), tm, reg)
		pod.Status = status
		if got := s.Serving(pod.UID); got != step.serving {
			t.Errorf("at %s on %s: Serving = %v, want %v (status %+v)", step.at, step.image, got, step.serving, status.ContainerStatuses)
		}
	}
	if s.Serving("no-such-pod") {
		t.Error("Serving of a pod the simulator does not run = true, want false")
	}
}
