package inplace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// resizablePod is testPod with resources on app (cpu 100m/200m, memory 64Mi/64Mi) and the
// container statuses reporting them, as a kubelet that resizes does.
func resizablePod() *corev1.Pod {
	pod := testPod()
	pod.Generation, pod.Status.ObservedGeneration = 1, 1
	app := &pod.Spec.Containers[0]
	app.Resources = corev1.ResourceRequirements{Requests: list("cpu", "100m", "memory", "64Mi"), Limits: list("cpu", "200m", "memory", "64Mi")}
	pod.Status.ContainerStatuses[0].Resources = app.Resources.DeepCopy()
	return pod
}

func TestCheckResources(t *testing.T) {
	guaranteed := func(s *corev1.PodSpec) {
		s.InitContainers = nil
		s.Containers = s.Containers[:1]
		s.Containers[0].Resources = corev1.ResourceRequirements{Requests: list("cpu", "100m", "memory", "64Mi"), Limits: list("cpu", "100m", "memory", "64Mi")}
	}
	tests := []struct {
		name   string
		mutate func(*corev1.PodSpec)
		res    map[string]Resources
		want   string // "" accepts
	}{
		{"a request the container has", nil, map[string]Resources{"app": {Requests: list("cpu", "150m")}}, ""},
		{"request and limit together, 0.5 as a quantity", nil, map[string]Resources{"app": {Requests: list("cpu", "0.5"), Limits: list("cpu", "1")}}, ""},
		{"no resources at all", nil, nil, ""},
		{"unknown container", nil, map[string]Resources{"db": {Requests: list("cpu", "1")}}, `no container named "db" (its containers: app, proxy)`},
		{"an init container that runs once", nil, map[string]Resources{"init": {Requests: list("cpu", "1")}}, `"init" is an init container that runs once`},
		{"a native sidecar", func(s *corev1.PodSpec) {
			withSidecar(s)
			s.InitContainers[1].Resources.Requests = list("cpu", "50m")
		}, map[string]Resources{"mesh": {Requests: list("cpu", "60m")}}, ""},
		{"not cpu or memory", nil, map[string]Resources{"app": {Limits: list("ephemeral-storage", "1Gi")}}, "limits.ephemeral-storage: only cpu and memory change in place"},
		{"a value the container does not declare", nil, map[string]Resources{"proxy": {Requests: list("memory", "64Mi")}}, `container "proxy": requests.memory: the container declares no memory request`},
		{"a limit below the request it keeps", nil, map[string]Resources{"app": {Limits: list("cpu", "50m")}}, "cpu limit 50m is below its request 100m"},
		{"a limit below the request it gives", nil, map[string]Resources{"app": {Requests: list("cpu", "300m"), Limits: list("cpu", "250m")}}, "cpu limit 250m is below its request 300m"},
		{"below zero", nil, map[string]Resources{"app": {Requests: list("cpu", "-1")}}, "requests.cpu -1 is below zero"},
		{"names nothing", nil, map[string]Resources{"app": {}}, "names no request or limit"},
		{"claims", nil, map[string]Resources{"app": {Requests: list("cpu", "1"), Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}, "claims cannot change in place"},
		{"Guaranteed stays Guaranteed", guaranteed, map[string]Resources{"app": {Requests: list("cpu", "300m"), Limits: list("cpu", "300m")}}, ""},
		{"Guaranteed would become Burstable", guaranteed, map[string]Resources{"app": {Limits: list("cpu", "300m")}},
			"QoS class would change from Guaranteed to Burstable"},
		{"pod-level resources", func(s *corev1.PodSpec) {
			s.Resources = &corev1.ResourceRequirements{Limits: list("cpu", "1")}
		}, map[string]Resources{"app": {Requests: list("cpu", "150m")}}, "pod-level resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := resizablePod().Spec
			if tt.mutate != nil {
				tt.mutate(&spec)
			}
			before := spec.DeepCopy()
			err := CheckResources(spec, tt.res)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckResources = %v, want it accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("CheckResources = %v, want an error containing %q", err, tt.want)
			}
			if !equalSpecs(*before, spec) {
				t.Errorf("CheckResources changed the spec it checked")
			}
		})
	}
}

func equalSpecs(a, b corev1.PodSpec) bool {
	return a.String() == b.String()
}

// statusResources sets what the kubelet reports the container runs with.
func statusResources(pod *corev1.Pod, name string, r corev1.ResourceRequirements) {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			pod.Status.ContainerStatuses[i].Resources = r.DeepCopy()
		}
	}
}

func withCondition(pod *corev1.Pod, t corev1.PodConditionType, reason, msg string) {
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg})
}

// resized is the pod after the kubelet applied the resize of its spec: the status reports the
// spec's resources, and observedGeneration the pod's generation.
func resized(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	for _, c := range p.Spec.Containers {
		statusResources(p, c.Name, c.Resources)
	}
	p.Status.ObservedGeneration = p.Generation
	return p
}

// applyResize applies a step meant for the resize subresource: only the resources change, and
// the generation moves as the API server moves it.
func applyResize(t *testing.T, pod *corev1.Pod, s Step) *corev1.Pod {
	t.Helper()
	if s.Subresource != "resize" {
		t.Fatalf("step = %+v, want a write to the resize subresource", s)
	}
	next := apply(t, pod, s)
	if next.Annotations[StateAnnotation] != pod.Annotations[StateAnnotation] {
		t.Fatalf("the resize patch carries the state, which the resize subresource drops: %s", s.Patch)
	}
	for i := range next.Spec.Containers {
		if next.Spec.Containers[i].Image != pod.Spec.Containers[i].Image {
			t.Fatalf("the resize patch changes an image: %s", s.Patch)
		}
	}
	next.Generation++
	return next
}

func TestResizeOnlyUpdate(t *testing.T) {
	target := Target{Resources: map[string]Resources{"app": {Requests: list("cpu", "150m"), Limits: list("cpu", "300m")}}, RolloutID: "r1"}
	pod := resizablePod()

	s, err := NextUpdate(pod, target, Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stage != StageResizing || s.Subresource != "" || strings.Contains(string(s.Patch), `"spec"`) {
		t.Fatalf("first step = %+v (%s), want the state alone, stage Resizing", s, s.Patch)
	}
	pod = apply(t, pod, s)
	st := mustState(t, pod)
	c := st.Containers[0]
	if !c.ResizeOnly || c.ResizeRestarts || c.BeforeImage != c.AfterImage || c.BeforeResources.Requests.Cpu().String() != "100m" || c.AfterResources.Limits.Cpu().String() != "300m" {
		t.Fatalf("state = %+v", c)
	}

	s, _ = NextUpdate(pod, target, Options{}, t0.Add(time.Second))
	if !strings.Contains(string(s.Patch), `"resourceVersion":"42"`) {
		t.Errorf("resize carries no resourceVersion: %s", s.Patch)
	}
	pod = applyResize(t, pod, s)
	if got := pod.Spec.Containers[0].Resources; got.Requests.Cpu().String() != "150m" || got.Limits.Cpu().String() != "300m" || got.Requests.Memory().String() != "64Mi" {
		t.Fatalf("resources after the resize: %v", got)
	}

	// The kubelet has read the resize but not applied it.
	inProgress := pod.DeepCopy()
	inProgress.Status.ObservedGeneration = inProgress.Generation
	withCondition(inProgress, corev1.PodResizeInProgress, "", "")
	s, _ = NextUpdate(inProgress, target, Options{}, t0.Add(2*time.Second))
	if s.Patch != nil || s.Done || !strings.Contains(s.Reason, "has not applied requests cpu=150m limits cpu=300m") {
		t.Fatalf("step while in progress = %+v, want a wait naming the values", s)
	}

	done := resized(pod)
	s, _ = NextUpdate(done, target, Options{}, t0.Add(3*time.Second))
	if s.Stage != StageUpdated || !s.Done || s.Event == nil || !strings.Contains(s.Event.Message, "resized in place: app requests cpu=100m limits cpu=200m -> requests cpu=150m limits cpu=300m") {
		t.Fatalf("step once applied = %+v, event %+v", s, s.Event)
	}
	if strings.Contains(string(s.Patch), `"image"`) {
		t.Errorf("a resize-only update patched an image: %s", s.Patch)
	}

	// With NotRequired, any restart is one the resize did not cause.
	restarted := done.DeepCopy()
	restarted.Status.ContainerStatuses[0].RestartCount = 1
	s, _ = NextUpdate(restarted, target, Options{}, t0.Add(3*time.Second))
	if s.Stage != StageFailed || !strings.Contains(s.Reason, "RestartCountClimbing") {
		t.Fatalf("step after a restart = %+v, want Failed on the restart", s)
	}
	if st := mustState(t, apply(t, restarted, s)); st.Failure != FailureRestartClimb {
		t.Errorf("failure = %q", st.Failure)
	}
}

func TestResizeWaitsAndFails(t *testing.T) {
	target := Target{Resources: map[string]Resources{"app": {Requests: list("cpu", "500")}}, RolloutID: "r1"}
	written := func(t *testing.T) *corev1.Pod {
		t.Helper()
		pod := resizablePod()
		pod.Spec.Containers[0].Resources.Limits = nil
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
		s, err := NextUpdate(pod, target, Options{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		pod = apply(t, pod, s)
		s, _ = NextUpdate(pod, target, Options{}, t0)
		return applyResize(t, pod, s)
	}
	const infeasible = "Node didn't have enough capacity: cpu, requested: 500000, capacity: 2000"
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		at     time.Duration
		stage  Stage
		code   FailureCode
		reason string
	}{
		{"Infeasible fails", func(p *corev1.Pod) {
			p.Status.ObservedGeneration = p.Generation
			withCondition(p, corev1.PodResizePending, corev1.PodReasonInfeasible, infeasible)
		}, time.Second, StageFailed, FailureResizeInfeasible, `ResizeInfeasible: the node cannot fit container "app" requests cpu=500: ` + infeasible},
		{"an Infeasible from before the kubelet read this resize waits", func(p *corev1.Pod) {
			p.Status.ObservedGeneration = p.Generation - 1
			withCondition(p, corev1.PodResizePending, corev1.PodReasonInfeasible, infeasible)
		}, time.Second, StageResizing, "", "describes generation 1, not yet 2"},
		{"Deferred waits", func(p *corev1.Pod) {
			p.Status.ObservedGeneration = p.Generation
			withCondition(p, corev1.PodResizePending, corev1.PodReasonDeferred, "Node didn't have enough resource: cpu")
		}, time.Minute, StageResizing, "", "resize deferred: Node didn't have enough resource: cpu"},
		{"Deferred past the progress deadline fails", func(p *corev1.Pod) {
			p.Status.ObservedGeneration = p.Generation
			withCondition(p, corev1.PodResizePending, corev1.PodReasonDeferred, "Node didn't have enough resource: cpu")
		}, 11 * time.Minute, StageFailed, FailureDeadlineExceeded, "ProgressDeadlineExceeded"},
		{"an error applying it fails", func(p *corev1.Pod) {
			p.Status.ObservedGeneration = p.Generation
			withCondition(p, corev1.PodResizeInProgress, corev1.PodReasonError, "cgroup write failed")
		}, time.Second, StageFailed, FailureResizeError, "ResizeError: the kubelet could not resize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := written(t)
			tt.mutate(pod)
			s, err := NextUpdate(pod, target, Options{}, t0.Add(tt.at))
			if err != nil {
				t.Fatal(err)
			}
			if s.Stage != tt.stage || !strings.Contains(s.Reason, tt.reason) {
				t.Fatalf("step = %+v, want stage %s, reason containing %q", s, tt.stage, tt.reason)
			}
			if tt.code != "" {
				if st := mustState(t, apply(t, pod, s)); st.Failure != tt.code {
					t.Errorf("failure = %q, want %q", st.Failure, tt.code)
				}
			} else if s.Patch != nil {
				t.Errorf("a wait wrote %s", s.Patch)
			}
		})
	}
}

func TestRevertOfAnInfeasibleResize(t *testing.T) {
	target := Target{Resources: map[string]Resources{"app": {Requests: list("cpu", "150"), Limits: list("cpu", "150")}}, RolloutID: "r1"}
	pod := resizablePod()
	s, _ := NextUpdate(pod, target, Options{}, t0)
	pod = apply(t, pod, s)
	s, _ = NextUpdate(pod, target, Options{}, t0)
	pod = applyResize(t, pod, s)
	pod.Status.ObservedGeneration = pod.Generation
	withCondition(pod, corev1.PodResizePending, corev1.PodReasonInfeasible, "Node didn't have enough capacity")
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(time.Second))
	pod = apply(t, pod, s)
	if st := mustState(t, pod); st.Stage != StageFailed {
		t.Fatalf("stage = %s, want Failed", st.Stage)
	}

	// The revert records itself first: the resize subresource takes no annotation.
	s, err := NextRevert(pod, Options{}, t0.Add(2*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stage != StageRollingBack || s.Subresource != "" || strings.Contains(string(s.Patch), `"spec"`) {
		t.Fatalf("first revert step = %+v (%s), want the state alone", s, s.Patch)
	}
	pod = apply(t, pod, s)
	if st := mustState(t, pod); st.Containers[0].RevertImage != "reg.example/app:v1" {
		t.Errorf("revert image of a resized-only container = %q, want the image it runs", st.Containers[0].RevertImage)
	}
	s, _ = NextRevert(pod, Options{}, t0.Add(2*time.Second), nil)
	pod = applyResize(t, pod, s)
	if got := pod.Spec.Containers[0].Resources; got.Requests.Cpu().String() != "100m" || got.Limits.Cpu().String() != "200m" {
		t.Fatalf("resources after the resize back: %v", got)
	}
	// The kubelet drops the pending resize once the spec asks for what runs.
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.Conditions = pod.Status.Conditions[:1]
	s, _ = NextRevert(pod, Options{}, t0.Add(3*time.Second), nil)
	if s.Stage != StageRolledBack || !s.Done || strings.Contains(string(s.Patch), `"image"`) {
		t.Fatalf("step once back = %+v (%s), want RolledBack with no image written", s, s.Patch)
	}
}

func TestResizeThenImageRestartsOnceEach(t *testing.T) {
	pod := resizablePod()
	pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
	}
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"},
		Resources: map[string]Resources{"app": {Requests: list("memory", "96Mi"), Limits: list("memory", "96Mi")}}, RolloutID: "r1"}
	s, _ := NextUpdate(pod, target, Options{}, t0)
	pod = apply(t, pod, s)
	if st := mustState(t, pod); !st.Containers[0].ResizeRestarts || st.Containers[0].ResizeOnly || st.Containers[0].expectedRestarts() != 2 {
		t.Fatalf("state = %+v, want a resize that restarts and an image change", st.Containers[0])
	}
	s, _ = NextUpdate(pod, target, Options{}, t0)
	if strings.Contains(string(s.Patch), "reg.example/app:v2") {
		t.Fatalf("the resize carries the image: %s", s.Patch)
	}
	pod = applyResize(t, pod, s)

	// The kubelet restarts the container for the memory change: one restart, allowed.
	pod = resized(pod)
	pod.Status.ContainerStatuses[0].RestartCount = 1
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://app-resized"
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(time.Second))
	if s.Stage != StageUpdating || !strings.Contains(string(s.Patch), `"image":"reg.example/app:v2"`) {
		t.Fatalf("step after the resize = %+v (%s), want the image patch", s, s.Patch)
	}
	pod = apply(t, pod, s)
	if st := mustState(t, pod); st.Containers[0].FromContainerID != "containerd://app-resized" || st.Containers[0].FromRestarts != 1 {
		t.Errorf("the image patch recorded %+v, want the container the resize started", st.Containers[0])
	}

	// The image restarts it once more: restart count 2 in all, the two the update causes.
	pod.Status.ContainerStatuses[0] = running("app", "reg.example/app:v2", "reg.example/app@sha256:"+strings.Repeat("3", 64), 2)
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://app-v2"
	pod.Status.ContainerStatuses[0].State.Running.StartedAt.Time = t0.Add(2 * time.Second)
	pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	s, _ = NextUpdate(pod, target, Options{}, t0.Add(3*time.Second))
	if !s.Done || s.Stage != StageUpdated {
		t.Fatalf("step on the new image = %+v, want Updated", s)
	}
	pod.Status.ContainerStatuses[0].RestartCount = 3
	if s, _ = NextUpdate(pod, target, Options{}, t0.Add(3*time.Second)); s.Stage != StageFailed || !strings.Contains(s.Reason, "RestartCountClimbing") {
		t.Fatalf("step after a third restart = %+v, want Failed", s)
	}
}

// ResizePatch is the resize NextUpdate sends, before anything is written.
func TestResizePatchIsTheUpdatesResize(t *testing.T) {
	target := Target{Images: map[string]string{"app": "reg.example/app:v2"},
		Resources: map[string]Resources{"app": {Requests: list("cpu", "150m")}}, RolloutID: "r1"}
	pod := resizablePod()
	dry, err := ResizePatch(pod, target, t0)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NextUpdate(pod, target, Options{}, t0)
	written := apply(t, pod, s)
	s, _ = NextUpdate(written, target, Options{}, t0)
	if s.Subresource != "resize" || string(s.Patch) != string(dry) {
		t.Fatalf("ResizePatch = %s\nthe update's resize = %s (%s)", dry, s.Patch, s.Subresource)
	}
	if none, err := ResizePatch(applyResize(t, written, s), target, t0); err != nil || none != nil {
		t.Errorf("ResizePatch once resized = %s, %v; want none", none, err)
	}
	if none, err := ResizePatch(testPod(), Target{Images: target.Images, RolloutID: "r1"}, t0); err != nil || none != nil {
		t.Errorf("ResizePatch of images alone = %s, %v; want none", none, err)
	}
}

// TestResizeOnlySetsTheLabels: an update that changes resources and no image has no image patch
// to carry the labels the target sets (a StatefulSet's revision label), so they are written on
// their own once the resize is applied, before the update ends: without them the workload's
// controller would recreate the pod for a revision it does not carry.
func TestResizeOnlySetsTheLabels(t *testing.T) {
	pod := testPod()
	pod.Labels = map[string]string{"controller-revision-hash": "web-1"}
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	pod.Spec.Containers[0].Resources = cpu("250m")
	pod.Status.ContainerStatuses[0].Resources = ptrTo(cpu("250m"))
	target := Target{Resources: map[string]Resources{"app": cpu("500m")}, RolloutID: "r1",
		Labels: map[string]string{"controller-revision-hash": "web-2"}}

	var stages []Stage
	for range 6 {
		s, err := NextUpdate(pod, target, Options{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, s.Stage)
		pod = apply(t, pod, s)
		if s.Done {
			break
		}
		// The kubelet applies a resize at once.
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	}
	st := mustState(t, pod)
	if st.Stage != StageUpdated {
		t.Fatalf("stage %s after %v, want Updated", st.Stage, stages)
	}
	if got := pod.Labels["controller-revision-hash"]; got != "web-2" {
		t.Errorf("revision label %q once resized, want web-2", got)
	}
	if pod.Spec.Containers[0].Image != "reg.example/app:v1" || !HasResources(pod.Spec.Containers[0].Resources, cpu("500m")) {
		t.Errorf("container %+v, want its image as it was and cpu 500m", pod.Spec.Containers[0])
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestNextAdoptRecordsResources: a pod created from a template with the new resources, and the
// previous image, is adopted as resized only, so the revert resizes it back and leaves its
// image; one already on the previous resources, however spelled, needs nothing.
func TestNextAdoptRecordsResources(t *testing.T) {
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	a := Adoption{RolloutID: "r1", Images: map[string]string{"app": "reg.example/app:v1"}, Resources: map[string]Resources{"app": cpu("250m")}}
	pod := testPod()
	pod.Spec.Containers[0].Resources = cpu("0.25")
	if s, err := NextAdopt(pod, a, t0); err != nil || s.Patch != nil || !s.Done {
		t.Errorf("pod on the previous resources: step %+v, err %v; want done, no write", s, err)
	}

	pod.Spec.Containers[0].Resources = cpu("500m")
	pod.Status.ContainerStatuses[0].Resources = ptrTo(cpu("500m"))
	s, err := NextAdopt(pod, a, t0)
	if err != nil || s.Patch == nil {
		t.Fatalf("step %+v, err %v; want the pod adopted", s, err)
	}
	adopted := apply(t, pod, s)
	st := mustState(t, adopted)
	if len(st.Containers) != 1 || !st.Containers[0].ResizeOnly || st.Containers[0].BeforeResources == nil ||
		!HasResources(*st.Containers[0].BeforeResources, cpu("250m")) || !HasResources(*st.Containers[0].AfterResources, cpu("500m")) {
		t.Fatalf("state = %+v, want app resized only, from 250m to 500m", st)
	}
	s, err = NextRevert(adopted, Options{}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	reverting := apply(t, adopted, s)
	s, err = NextRevert(reverting, Options{}, t0, nil)
	if err != nil || s.Subresource != "resize" {
		t.Fatalf("revert step %+v, err %v; want the resize back", s, err)
	}
	resized := apply(t, reverting, s)
	if !HasResources(resized.Spec.Containers[0].Resources, cpu("250m")) || resized.Spec.Containers[0].Image != "reg.example/app:v1" {
		t.Errorf("after the resize back: %+v, want cpu 250m on the image it ran", resized.Spec.Containers[0])
	}
}
