package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

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
