package kubeletsim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resizeTimings are testTimings with a container stop and a resize that take time, as the
// simulator's defaults do.
var resizeTimings = func() timings {
	t := testTimings
	t.stop, t.resize = 200*time.Millisecond, 200*time.Millisecond
	return t
}()

// resources is a container's requests and limits: cpu and memory, each the same for both.
func resources(cpu, memory string) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

// resizePod is a running pod whose app container has cpu and memory, and a resizePolicy
// RestartContainer for each resource in restart.
func resizePod(cpu, memory string, restart ...corev1.ResourceName) *corev1.Pod {
	pod := podOn("web-0", "sim-node-0", "")
	pod.Status = corev1.PodStatus{}
	pod.Generation = 1
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Containers[0].Resources = resources(cpu, memory)
	for _, r := range restart {
		pod.Spec.Containers[0].ResizePolicy = append(pod.Spec.Containers[0].ResizePolicy, corev1.ContainerResizePolicy{ResourceName: r, RestartPolicy: corev1.RestartContainer})
	}
	return pod
}

// resizeView renders what a resize changes in a status: per container its instance (c1, c2, ...
// by containerID, in the order seen), restart count, state, and the resources its status
// reports; then observedGeneration and the resize conditions with their generation and reason.
type resizeView struct{ ids map[string]string }

func (v *resizeView) of(st corev1.PodStatus) string {
	var parts []string
	for _, c := range append(append([]corev1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
		if v.ids[c.ContainerID] == "" && c.ContainerID != "" {
			v.ids[c.ContainerID] = fmt.Sprintf("c%d", len(v.ids)+1)
		}
		res := "-"
		if c.Resources != nil {
			res = c.Resources.Requests.Cpu().String() + "/" + c.Resources.Requests.Memory().String()
		}
		parts = append(parts, fmt.Sprintf("%s:%s/r%d/%s/%s", c.Name, v.ids[c.ContainerID], c.RestartCount, stateOf(c), res))
	}
	parts = append(parts, fmt.Sprintf("gen=%d", st.ObservedGeneration))
	for _, c := range st.Conditions {
		if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
			parts = append(parts, fmt.Sprintf("%s(%d)%s", c.Type, c.ObservedGeneration, c.Reason))
		}
	}
	return strings.Join(parts, " ")
}

// resizeStep is what changes at a time, if anything, and the status synced then.
type resizeStep struct {
	at     time.Duration
	cpu    string // the app's new cpu, requests and limits
	memory string // the app's new memory
	image  string // the app's new image
	want   string
}

// runResize syncs pod at each step's time, after writing its change into the spec (a new
// generation), and checks the status against the step's view; it returns the last status.
func runResize(t *testing.T, p *podSim, pod *corev1.Pod, steps []resizeStep) corev1.PodStatus {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := &registry{}
	v := &resizeView{ids: map[string]string{}}
	for _, s := range steps {
		app := &pod.Spec.Containers[0]
		if s.cpu != "" || s.memory != "" {
			cpu, mem := app.Resources.Requests[corev1.ResourceCPU], app.Resources.Requests[corev1.ResourceMemory]
			if s.cpu != "" {
				cpu = resource.MustParse(s.cpu)
			}
			if s.memory != "" {
				mem = resource.MustParse(s.memory)
			}
			app.Resources = resources(cpu.String(), mem.String())
			pod.Generation++
		}
		if s.image != "" {
			app.Image = s.image
			pod.Generation++
		}
		status, _ := p.sync(pod, t0.Add(s.at), resizeTimings, reg)
		pod.Status = status
		if got := v.of(status); got != s.want {
			t.Fatalf("at %v:\n got %s\nwant %s", s.at, got, s.want)
		}
	}
	return pod.Status
}

// newResizeSim is the simulated pod of pod, its first sync done at the start of 2026: its
// containers are then created.
func newResizeSim(pod *corev1.Pod) *podSim {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	p.node = "sim-node-0"
	pod.Status, _ = p.sync(pod, t0, resizeTimings, &registry{})
	return p
}

// TestResize: a resize as kubelet v1.34.5 carried it out on the real node. With resizePolicy
// NotRequired (or none), the running container takes the new resources in place: same
// container, restart count unchanged; PodResizeInProgress shows, with the resize's generation,
// until the status reports them, and observedGeneration is the resize's at once. With
// RestartContainer for a resource that changes, the container restarts once, into the new
// resources. An image patch and such a resize that come one during the other's sync restart
// the container twice, in either order.
func TestResize(t *testing.T) {
	tests := []struct {
		name    string
		restart []corev1.ResourceName
		steps   []resizeStep
	}{
		{"cpu, no policy: in place", nil, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, cpu: "200m", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 2*time.Second + 100*time.Millisecond, want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 2*time.Second + 200*time.Millisecond, want: "app:c1/r0/Running/Ready/200m/64Mi gen=2"},
		}},
		{"cpu NotRequired, memory RestartContainer: cpu in place", []corev1.ResourceName{corev1.ResourceMemory}, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, cpu: "200m", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 3 * time.Second, want: "app:c1/r0/Running/Ready/200m/64Mi gen=2"},
		}},
		{"memory RestartContainer: one restart", []corev1.ResourceName{corev1.ResourceMemory}, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, memory: "96Mi", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 2*time.Second + 200*time.Millisecond, want: "app:c2/r1/Running/100m/96Mi gen=2"},
			{at: 3 * time.Second, want: "app:c2/r1/Running/Ready/100m/96Mi gen=2"},
		}},
		{"image patch, then the memory resize during its stop: two restarts", []corev1.ResourceName{corev1.ResourceMemory}, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, image: "registry.example/app:v2", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2"},
			{at: 2*time.Second + 100*time.Millisecond, memory: "96Mi", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2"},
			// The v2 container starts with the allocation its sync read; the next sync allocates
			// the resize and restarts it.
			{at: 2*time.Second + 400*time.Millisecond, want: "app:c2/r1/Running/100m/64Mi gen=3 PodResizeInProgress(3)"},
			{at: 3 * time.Second, want: "app:c3/r2/Running/Ready/100m/96Mi gen=3"},
		}},
		{"memory resize, then an image patch during its stop: two restarts", []corev1.ResourceName{corev1.ResourceMemory}, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, memory: "96Mi", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 2*time.Second + 100*time.Millisecond, image: "registry.example/app:v2", want: "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
			{at: 2*time.Second + 200*time.Millisecond, want: "app:c2/r1/Running/100m/96Mi gen=3"},
			{at: 3 * time.Second, want: "app:c3/r2/Running/Ready/100m/96Mi gen=3"},
		}},
		{"image patch and memory resize read by one sync: one restart", []corev1.ResourceName{corev1.ResourceMemory}, []resizeStep{
			{at: time.Second, want: "app:c1/r0/Running/Ready/100m/64Mi gen=1"},
			{at: 2 * time.Second, memory: "96Mi", image: "registry.example/app:v2", want: "app:c1/r0/Running/Ready/100m/64Mi gen=3 PodResizeInProgress(3)"},
			{at: 3 * time.Second, want: "app:c2/r1/Running/Ready/100m/96Mi gen=3"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := resizePod("100m", "64Mi", tt.restart...)
			runResize(t, newResizeSim(pod), pod, tt.steps)
		})
	}
}

// TestResizePending: a resize above the node's allocatable is Infeasible and one above what the
// node's other pods leave free is Deferred, with the kubelet's messages; the spec keeps what was
// asked, the status the resources the container runs with, and the container is not restarted.
// A later resize that fits (or room made by the other pods) clears the condition and applies.
func TestResizePending(t *testing.T) {
	tests := []struct {
		name    string
		used    int64 // the cpu millicores the node's other pods hold
		cpu     string
		memory  string
		reason  string
		message string
	}{
		{"cpu above allocatable", 0, "500", "", ResizeInfeasible, "Node didn't have enough capacity: cpu, requested: 500000, capacity: 16000"},
		{"memory above allocatable", 0, "", "100Gi", ResizeInfeasible, "Node didn't have enough capacity: memory, requested: 107374182400, capacity: 68719476736"},
		{"both above allocatable: memory is named", 0, "500", "100Gi", ResizeInfeasible, "Node didn't have enough capacity: memory, requested: 107374182400, capacity: 68719476736"},
		{"cpu above what is free", 15000, "2", "", ResizeDeferred, "Node didn't have enough resource: cpu, requested: 2000, used: 15000, capacity: 16000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			pod := resizePod("100m", "64Mi")
			p := newResizeSim(pod)
			used := tt.used
			p.others = func() (int64, int64) { return used, 0 }
			v := &resizeView{ids: map[string]string{}}
			reg := &registry{}
			sync := func(at time.Duration) corev1.PodStatus {
				t.Helper()
				st, _ := p.sync(pod, t0.Add(at), resizeTimings, reg)
				pod.Status = st
				return st
			}
			sync(time.Second)
			asked := resources("100m", "64Mi")
			if tt.cpu != "" {
				asked.Requests[corev1.ResourceCPU], asked.Limits[corev1.ResourceCPU] = resource.MustParse(tt.cpu), resource.MustParse(tt.cpu)
			}
			if tt.memory != "" {
				asked.Requests[corev1.ResourceMemory], asked.Limits[corev1.ResourceMemory] = resource.MustParse(tt.memory), resource.MustParse(tt.memory)
			}
			pod.Spec.Containers[0].Resources, pod.Generation = asked, 2
			for _, at := range []time.Duration{2 * time.Second, 5 * time.Second} {
				st := sync(at)
				want := "app:c1/r0/Running/Ready/100m/64Mi gen=2 PodResizePending(2)" + tt.reason
				if got := v.of(st); got != want {
					t.Fatalf("at %v:\n got %s\nwant %s", at, got, want)
				}
				if c := conditionOf(st, corev1.PodResizePending); c.Message != tt.message || c.Status != corev1.ConditionTrue {
					t.Errorf("at %v: PodResizePending %s %q, want True %q", at, c.Status, c.Message, tt.message)
				}
				if lim := st.ContainerStatuses[0].Resources.Limits; lim.Cpu().Cmp(resource.MustParse("100m")) != 0 || lim.Memory().Cmp(resource.MustParse("64Mi")) != 0 {
					t.Errorf("at %v: status limits %v, want the ones the container runs with", at, lim)
				}
			}

			// Room on the node, for a Deferred one; a resize that fits, for an Infeasible one.
			used = 0
			if tt.reason == ResizeInfeasible {
				pod.Spec.Containers[0].Resources, pod.Generation = resources("200m", "96Mi"), 3
			}
			gen := pod.Generation
			want := fmt.Sprintf("app:c1/r0/Running/Ready/100m/64Mi gen=%d PodResizeInProgress(%d)", gen, gen)
			if got := v.of(sync(6 * time.Second)); got != want {
				t.Fatalf("once it fits:\n got %s\nwant %s", got, want)
			}
			cpu := pod.Spec.Containers[0].Resources.Requests.Cpu().String()
			mem := pod.Spec.Containers[0].Resources.Requests.Memory().String()
			want = fmt.Sprintf("app:c1/r0/Running/Ready/%s/%s gen=%d", cpu, mem, gen)
			if got := v.of(sync(7 * time.Second)); got != want {
				t.Fatalf("once applied:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func conditionOf(st corev1.PodStatus, t corev1.PodConditionType) corev1.PodCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.PodCondition{}
}

// TestResizeNativeSidecar: a native sidecar is allocated and resized as a container is.
func TestResizeNativeSidecar(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	always := corev1.ContainerRestartPolicyAlways
	pod := resizePod("100m", "64Mi")
	pod.Spec.InitContainers = []corev1.Container{{Name: "mesh", Image: "registry.example/mesh:v1", RestartPolicy: &always, Resources: resources("50m", "32Mi"),
		ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}}}
	p := newResizeSim(pod)
	reg := &registry{}
	v := &resizeView{ids: map[string]string{}}
	steps := []struct {
		at   time.Duration
		want string
	}{
		{time.Second, "mesh:c1/r0/Running/Ready/50m/32Mi app:c2/r0/Running/Ready/100m/64Mi gen=1"},
		{2 * time.Second, "mesh:c1/r0/Running/Ready/50m/32Mi app:c2/r0/Running/Ready/100m/64Mi gen=2 PodResizeInProgress(2)"},
		{3 * time.Second, "mesh:c3/r1/Running/Ready/50m/48Mi app:c2/r0/Running/Ready/100m/64Mi gen=2"},
	}
	for _, s := range steps {
		if s.at == 2*time.Second {
			pod.Spec.InitContainers[0].Resources, pod.Generation = resources("50m", "48Mi"), 2
		}
		st, _ := p.sync(pod, t0.Add(s.at), resizeTimings, reg)
		pod.Status = st
		if got := v.of(st); got != s.want {
			t.Fatalf("at %v:\n got %s\nwant %s", s.at, got, s.want)
		}
	}
}

// A running container's status always carries the resources it runs with, {} when it has none,
// in a pod run to completion too: the API server refuses a resize of a pod whose running
// container reports none.
func TestRunningContainerReportsResources(t *testing.T) {
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		res    corev1.ResourceRequirements
		want   string
	}{
		{"no resources", corev1.RestartPolicyAlways, corev1.ResourceRequirements{}, `"resources":{}`},
		{"resources", corev1.RestartPolicyAlways, resources("100m", "64Mi"), `"resources":{"limits":{"cpu":"100m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}`},
		{"run to completion", corev1.RestartPolicyNever, resources("100m", "64Mi"), `"resources":{"limits":{"cpu":"100m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podOn("web-0", "sim-node-0", "")
			pod.Status = corev1.PodStatus{}
			pod.Spec.RestartPolicy = tt.policy
			pod.Spec.Containers[0].Resources = tt.res
			p := newResizeSim(pod)
			st, _ := p.sync(pod, time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC), resizeTimings, &registry{})
			cs := st.ContainerStatuses[0]
			if cs.State.Running == nil {
				t.Fatalf("status %+v: want running", cs)
			}
			data, err := json.Marshal(cs)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.want) {
				t.Errorf("status JSON %s has no %s", data, tt.want)
			}
		})
	}
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(name, cpu, memory string, sidecar bool) corev1.Container {
		out := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}}
		if sidecar {
			out.RestartPolicy = &always
		}
		return out
	}
	tests := []struct {
		name     string
		spec     corev1.PodSpec
		alloc    map[string]corev1.ResourceRequirements
		cpu, mem int64
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{c("a", "100m", "1Mi", false), c("b", "200m", "2Mi", false)}}, nil, 300, 3 << 20},
		{"a bigger init container wins", corev1.PodSpec{
			InitContainers: []corev1.Container{c("init", "1", "1Mi", false)},
			Containers:     []corev1.Container{c("a", "100m", "4Mi", false)}}, nil, 1000, 4 << 20},
		{"sidecars run beside the containers and the later init containers", corev1.PodSpec{
			InitContainers: []corev1.Container{c("mesh", "100m", "1Mi", true), c("init", "500m", "1Mi", false)},
			Containers:     []corev1.Container{c("a", "100m", "1Mi", false)}}, nil, 600, 2 << 20},
		{"the allocation replaces the spec", corev1.PodSpec{Containers: []corev1.Container{c("a", "100m", "1Mi", false)}},
			map[string]corev1.ResourceRequirements{"a": {Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}, 2000, 0},
		{"overhead counts", corev1.PodSpec{Containers: []corev1.Container{c("a", "100m", "1Mi", false)},
			Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}, nil, 110, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, mem := podRequests(&corev1.Pod{Spec: tt.spec}, tt.alloc)
			if cpu != tt.cpu || mem != tt.mem {
				t.Errorf("podRequests = %dm, %d bytes; want %dm, %d bytes", cpu, mem, tt.cpu, tt.mem)
			}
		})
	}
}

// The status patch drops a resize condition the kubelet no longer holds, and leaves the
// conditions of other writers alone.
func TestOwnConditionsPatch(t *testing.T) {
	old := []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue},
		{Type: "example.com/gate", Status: corev1.ConditionTrue},
	}
	conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	data, err := json.Marshal(ownConditionsPatch(old, conds))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":null},{"$patch":"delete","type":"PodResizeInProgress"}]`
	if string(data) != want {
		t.Errorf("patch %s, want %s", data, want)
	}
}
