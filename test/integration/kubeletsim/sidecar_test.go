package kubeletsim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// sidecarStep is the sidecar's spec image from a time on, and the pod's status then.
type sidecarStep struct {
	at    time.Duration
	image string
	want  string
	ready bool
}

// TestNativeSidecarRestartsOnImageChange: a native sidecar (an init container with restartPolicy
// Always) of a restartPolicy Always pod runs beside the app container, as a kubelet v1.34 runs
// it: its readiness counts in the pod's, and a new image in its spec restarts that one container
// (a new containerID and imageID, restartCount 1) while the app container and the plain init
// container stay as they were. With a readiness probe the restarted sidecar is not Ready until
// the probe would pass, and neither is the pod; without one, as on the real node, the status
// shows the old sidecar Running and Ready until the new one runs, Ready at once, and the pod
// stays Ready. A simulator started again adopts it running, without a restart.
func TestNativeSidecarRestartsOnImageChange(t *testing.T) {
	tests := []struct {
		name  string
		probe *corev1.Probe
		steps []sidecarStep
	}{
		{"readiness probe", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}, []sidecarStep{
			{0, "registry.example/mesh:v1", "Pending init=Exited:0,ContainerCreating main=ContainerCreating", false},
			{time.Second, "registry.example/mesh:v1", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
			{2 * time.Second, "registry.example/mesh:v2", "Running init=Exited:0,Exited:0 main=Running/Ready", false},
			{2*time.Second + 300*time.Millisecond, "registry.example/mesh:v2", "Running init=Exited:0,Running main=Running/Ready", false},
			{3 * time.Second, "registry.example/mesh:v2", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
		}},
		{"no probe", nil, []sidecarStep{
			{0, "registry.example/mesh:v1", "Pending init=Exited:0,ContainerCreating main=ContainerCreating", false},
			{time.Second, "registry.example/mesh:v1", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
			{2 * time.Second, "registry.example/mesh:v2", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
			{2*time.Second + 100*time.Millisecond, "registry.example/mesh:v2", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
			{2*time.Second + 300*time.Millisecond, "registry.example/mesh:v2", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
			{3 * time.Second, "registry.example/mesh:v2", "Running init=Exited:0,Running/Ready main=Running/Ready", true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sidecarRestart(t, tt.probe, tt.steps)
		})
	}
}

func sidecarRestart(t *testing.T, probe *corev1.Probe, steps []sidecarStep) {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	always := corev1.ContainerRestartPolicyAlways
	pod := podOn("web-0", "sim-node-0", "")
	pod.Status = corev1.PodStatus{}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "registry.example/setup:v1"},
		{Name: "mesh", Image: "registry.example/mesh:v1", RestartPolicy: &always, ReadinessProbe: probe},
	}
	p := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	p.node = "sim-node-0"
	reg := &registry{}
	sync := func(at time.Duration) corev1.PodStatus {
		t.Helper()
		status, _ := p.sync(pod, t0.Add(at), testTimings, reg)
		pod.Status = status
		return status
	}

	var before corev1.PodStatus
	for _, s := range steps {
		pod.Spec.InitContainers[1].Image = s.image
		status := sync(s.at)
		if got := summary(status); got != s.want {
			t.Fatalf("at %v: %s; want %s", s.at, got, s.want)
		}
		if got := conditionTrue(status.Conditions, corev1.PodReady); got != s.ready {
			t.Errorf("at %v: pod Ready %v, want %v", s.at, got, s.ready)
		}
		if s.at == time.Second {
			before = *status.DeepCopy()
		}
	}

	after := pod.Status
	old, sidecar := before.InitContainerStatuses[1], after.InitContainerStatuses[1]
	if sidecar.RestartCount != 1 || sidecar.ContainerID == old.ContainerID || sidecar.ContainerID == "" {
		t.Errorf("sidecar restart count %d, containerID %q (was %q): want 1 restart into a new container", sidecar.RestartCount, sidecar.ContainerID, old.ContainerID)
	}
	if sidecar.Image != "registry.example/mesh:v2" || sidecar.ImageID == old.ImageID {
		t.Errorf("sidecar on %s (%s), was %s: want registry.example/mesh:v2 and a new imageID", sidecar.Image, sidecar.ImageID, old.ImageID)
	}
	if sidecar.LastTerminationState.Terminated == nil || sidecar.LastTerminationState.Terminated.ContainerID != old.ContainerID {
		t.Errorf("sidecar last state %+v, want the old container terminated", sidecar.LastTerminationState)
	}
	if app := after.ContainerStatuses[0]; app.RestartCount != 0 || app.ContainerID != before.ContainerStatuses[0].ContainerID {
		t.Errorf("the app container restarted: restart count %d, containerID %q (was %q)", app.RestartCount, app.ContainerID, before.ContainerStatuses[0].ContainerID)
	}

	adopted := newPodSim(pod, "10.100.0.1", "172.18.0.2", t0)
	adopted.node = "sim-node-0"
	status, _ := adopted.sync(pod, t0.Add(4*time.Second), testTimings, reg)
	if got := status.InitContainerStatuses[1]; got.ContainerID != sidecar.ContainerID || got.RestartCount != 1 || got.State.Running == nil {
		t.Errorf("adopted sidecar: containerID %q, restart count %d, running %v; want %q, 1, running", got.ContainerID, got.RestartCount, got.State.Running != nil, sidecar.ContainerID)
	}
}
