package tekton_test

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// A PipelineRun's custom task resizes a StatefulSet's pods in place: resources in the embedded
// InPlaceRollout spec and no image at all; every pod keeps its UID and its app container, which
// the kubelet reports running with the new CPU.
func TestCustomRunResizesInPlace(t *testing.T) {
	const pods = 3
	ns := env.Namespace(t)
	clitest.CreateStatefulSetWith(t, env, ns, "agent", pods, func(tmpl *corev1.PodTemplateSpec) {
		tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
		}
	})
	before := recordPods(t, ns, "agent")
	create(t, dynamicClient(t), pipelineRunsGVR, ns, `
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: resize
spec:
  pipelineSpec:
    tasks:
      - name: rollout
        taskSpec:
          apiVersion: inplace-rollout.io/v1alpha1
          kind: InPlaceRollout
          spec:
            target: {kind: StatefulSet, name: agent}
            resources: {app: {requests: {cpu: 150m}, limits: {cpu: 300m}}}
            batches: [1, "100%"]
            soak: 1s
            timeout: 2m
`)
	cond := waitPipelineRun(t, ns, "resize", rolloutTimeout)
	cr := waitCustomRun(t, ns, "resize", "rollout", reconcileTimeout, "done", isDone)
	if cond.Status != corev1.ConditionTrue {
		t.Fatalf("PipelineRun %s/resize: %s %s: %s; its CustomRun: %+v", ns, cond.Status, cond.Reason, cond.Message, succeeded(cr))
	}
	if got := result(cr, "updated-pods"); got != fmt.Sprint(pods) {
		t.Errorf("CustomRun %s: result updated-pods = %q, want %d", cr.Name, got, pods)
	}
	if after := recordPods(t, ns, "agent"); !maps.Equal(before, after) {
		t.Errorf("pods were recreated or restarted: before %v, after %v", before, after)
	}
	for _, p := range clitest.ListPods(t, env, ns, "app=agent") {
		cs := cluster.ContainerStatus(&p, "app")
		if cs == nil || cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "150m" || cs.Resources.Limits.Cpu().String() != "300m" {
			t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu 150m/300m", p.Name, cs)
		}
	}
}
