package workload

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestLoadLeavesOutPodsThatCanNoLongerRun(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	client := fake.NewClientset(
		pod("web-running", corev1.PodRunning),
		pod("web-pending", corev1.PodPending),
		pod("web-evicted", corev1.PodFailed),
		pod("web-completed", corev1.PodSucceeded),
	)
	w, err := Load(context.Background(), client, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "web-pending" || names[1] != "web-running" {
		t.Errorf("pods %v, want [web-pending web-running]", names)
	}
}
