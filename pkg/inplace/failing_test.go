package inplace

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestFailingBeforeReason(t *testing.T) {
	crashed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	tests := []struct {
		name string
		cs   *corev1.ContainerStatus
		want string
	}{
		{"no status", nil, ""},
		{"running and ready", &corev1.ContainerStatus{Ready: true, RestartCount: 3,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: crashed}}, ""},
		{"backing off", &corev1.ContainerStatus{RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}, "CrashLoopBackOff"},
		{"between two crashes: started again, not ready, the last one failed", &corev1.ContainerStatus{RestartCount: 3,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: crashed}}, "CrashLoopBackOff"},
		{"just exited with an error", &corev1.ContainerStatus{RestartCount: 2,
			State: corev1.ContainerState{Terminated: crashed}}, "CrashLoopBackOff"},
		{"starting after a clean exit", &corev1.ContainerStatus{RestartCount: 1,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}, ""},
		{"starting for the first time", &corev1.ContainerStatus{
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failingBeforeReason(tt.cs); got != tt.want {
				t.Errorf("failingBeforeReason = %q, want %q", got, tt.want)
			}
		})
	}
}
