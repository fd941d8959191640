package integration

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// cpuPod creates a pod on node whose app container requests and is limited to cpu, and waits
// until it is Ready.
func cpuPod(t *testing.T, ns, name, node, cpu string) *corev1.Pod {
	t.Helper()
	q := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	tmpl := podTemplate(nil)
	tmpl.Spec.NodeName = node
	tmpl.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	tmpl.Spec.Containers = tmpl.Spec.Containers[:1]
	tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: q, Limits: q.DeepCopy()}
	createPod(t, ns, name, tmpl)
	return env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
}

// resizeCPU writes cpu as the app container's request and limit through the pods/resize
// subresource, with a strategic-merge patch as kubectl patch --subresource resize does.
func resizeCPU(t *testing.T, ns, name, cpu string) *corev1.Pod {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}]}}`, cpu, cpu)
	p, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resizing the cpu of %s/%s to %s: %v", ns, name, cpu, err)
	}
	return p
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// A resize that fits the node but not what its other pods hold waits, PodResizePending
// Deferred with the kubelet's message, the container untouched; once the pod holding the room
// is deleted, the simulator tries it again, allocates it, the container takes it in place and
// the condition is gone from the pod's status.
func TestResizeDeferredUntilRoom(t *testing.T) {
	ns := env.Namespace(t)
	nodes := env.Sim.NodeNames()
	node := nodes[len(nodes)-1]
	cpuPod(t, ns, "big", node, "15")
	before := *cluster.ContainerStatus(cpuPod(t, ns, "small", node, "500m"), "app")

	asked := resizeCPU(t, ns, "small", "2")
	p := env.WaitForPod(t, ns, "small", 30*time.Second, "PodResizePending", func(p *corev1.Pod) bool {
		return podCondition(p, corev1.PodResizePending) != nil
	})
	c := podCondition(p, corev1.PodResizePending)
	message := regexp.MustCompile(`^Node didn't have enough resource: cpu, requested: 2000, used: (\d+), capacity: 16000$`)
	if c.Status != corev1.ConditionTrue || c.Reason != kubeletsim.ResizeDeferred || !message.MatchString(c.Message) || c.ObservedGeneration != asked.Generation {
		t.Errorf("PodResizePending %s %s %q (generation %d), want True %s %q (generation %d)", c.Status, c.Reason, c.Message, c.ObservedGeneration, kubeletsim.ResizeDeferred, message, asked.Generation)
	}
	cs := cluster.ContainerStatus(p, "app")
	if cs.ContainerID != before.ContainerID || cs.Resources.Limits.Cpu().Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("app container %s with cpu limit %s while the resize waits; want %s with 500m", cs.ContainerID, cs.Resources.Limits.Cpu(), before.ContainerID)
	}

	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "big", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s/big: %v", ns, err)
	}
	p = env.WaitForPod(t, ns, "small", 30*time.Second, "the resize applied", func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.Resources != nil && cs.Resources.Limits.Cpu().Cmp(resource.MustParse("2")) == 0 &&
			podCondition(p, corev1.PodResizePending) == nil && podCondition(p, corev1.PodResizeInProgress) == nil
	})
	if cs := cluster.ContainerStatus(p, "app"); cs.ContainerID != before.ContainerID || cs.RestartCount != before.RestartCount {
		t.Errorf("app container %s, restartCount %d after the resize; want %s, %d: resized in place", cs.ContainerID, cs.RestartCount, before.ContainerID, before.RestartCount)
	}
}
