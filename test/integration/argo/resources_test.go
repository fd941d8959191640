package argo_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// withAppResources gives the app container CPU requests and limits (cpuReq/cpuLim) and memory,
// resized without a restart.
func withAppResources(cpuReq, cpuLim string) func(*corev1.PodTemplateSpec) {
	return func(tmpl *corev1.PodTemplateSpec) {
		app := &tmpl.Spec.Containers[0]
		app.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse("128Mi")},
		}
	}
}

// The step plugin resizes a StatefulSet's pods in place: resources given in the step's config,
// and resources taken from the Rollout's template (fromRollout), which is how a Rollout's own
// resource change reaches the workload it drives.
func TestStepResizesInPlace(t *testing.T) {
	const pods = 3
	cpu := map[string]any{"app": map[string]any{"requests": map[string]any{"cpu": "150m"}, "limits": map[string]any{"cpu": "300m"}}}
	tests := []struct {
		name  string
		steps stepsFunc
		// change makes the new revision of the Rollout.
		change func(t *testing.T, ns string) (oldHash string)
	}{
		{
			name: "resources in the step's config",
			steps: func(image string) []map[string]any {
				cfg := stepConfig("web", image, map[string]any{"resources": cpu})
				delete(cfg, "images")
				return []map[string]any{cfg}
			},
			change: func(t *testing.T, ns string) string {
				return updateTemplate(t, ns, "web", func(tmpl *corev1.PodTemplateSpec) {
					tmpl.Annotations = map[string]string{"example.com/change": "cpu"}
				})
			},
		},
		{
			name: "resources from the Rollout's template",
			steps: func(image string) []map[string]any {
				cfg := stepConfig("web", image, map[string]any{"fromRollout": true, "pinDigests": "never"})
				delete(cfg, "images")
				return []map[string]any{cfg}
			},
			change: func(t *testing.T, ns string) string {
				return updateTemplate(t, ns, "web", withAppResources("150m", "300m"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			clitest.CreateStatefulSetWith(t, env, ns, "web", pods, withAppResources("100m", "200m"))
			before := map[string]corev1.Pod{}
			for _, p := range clitest.ListPods(t, env, ns, "app=web") {
				before[p.Name] = p
			}
			createRolloutWith(t, ns, "web", clitest.AppV1, tt.steps, withAppResources("100m", "200m"))
			healthyOn(t, ns, "web", tt.change(t, ns))

			after := clitest.ListPods(t, env, ns, "app=web")
			if len(after) != pods {
				t.Fatalf("%d pods, want %d", len(after), pods)
			}
			for _, p := range after {
				b := before[p.Name]
				cs, bcs := cluster.ContainerStatus(&p, "app"), cluster.ContainerStatus(&b, "app")
				switch {
				case p.UID != b.UID:
					t.Errorf("pod %s was recreated", p.Name)
				case cs.ContainerID != bcs.ContainerID || cs.RestartCount != bcs.RestartCount:
					t.Errorf("pod %s: app restarted (container %s -> %s, restarts %d -> %d) for a CPU resize", p.Name, bcs.ContainerID, cs.ContainerID, bcs.RestartCount, cs.RestartCount)
				case cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "150m" || cs.Resources.Limits.Cpu().String() != "300m":
					t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu 150m/300m", p.Name, cs.Resources)
				case p.Spec.Containers[0].Image != clitest.AppV1:
					t.Errorf("pod %s: app image %s, want %s as it was", p.Name, p.Spec.Containers[0].Image, clitest.AppV1)
				}
			}
			// Every pod counted on the template's new revision: none is left for the controller
			// to recreate.
			sts := clitest.WaitStatefulSet(t, env, ns, "web", "every replica counted on the new revision", func(s *appsv1.StatefulSet) bool {
				return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == pods && s.Status.CurrentRevision == s.Status.UpdateRevision
			})
			if r := sts.Spec.Template.Spec.Containers[0].Resources; r.Requests.Cpu().String() != "150m" || r.Limits.Cpu().String() != "300m" {
				t.Errorf("StatefulSet web's template asks for %v, want cpu 150m/300m", r)
			}
		})
	}
}
