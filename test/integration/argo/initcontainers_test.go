package argo_test

import (
	"context"
	"strings"
	"testing"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// The images of the init containers of the tests below: setup is a plain init container, mesh a
// native sidecar (restartPolicy Always).
const (
	setupV1 = "registry.example/setup:v1"
	setupV2 = "registry.example/setup:v2"
	meshV1  = "registry.example/mesh:v1"
	meshV2  = "registry.example/mesh:v2"
)

// withInits gives a pod template the plain init container setup on setupV1 and the native
// sidecar mesh on meshV1.
func withInits(tmpl *corev1.PodTemplateSpec) {
	always := corev1.ContainerRestartPolicyAlways
	tmpl.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: setupV1}, {Name: "mesh", Image: meshV1, RestartPolicy: &always}}
}

// initContainer returns the spec and the status of the pod's init container name.
func initContainer(p *corev1.Pod, name string) (spec *corev1.Container, status *corev1.ContainerStatus) {
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == name {
			spec = &p.Spec.InitContainers[i]
		}
	}
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			status = &p.Status.InitContainerStatuses[i]
		}
	}
	return spec, status
}

// TestStepInitContainers: a Rollout whose step takes its images from its template
// (fromRollout), over a StatefulSet whose pods have a plain init container and a native sidecar.
// A new image of the native sidecar is rolled out in place like a container's: the sidecar of
// every pod restarts on it, and the StatefulSet's template gets it. A new image of the plain init
// container, which changes in place only with includeInit, is refused naming it, rather than
// reported done with every pod left on the old one; so is the plain init container given in
// images without includeInit.
func TestStepInitContainers(t *testing.T) {
	const pods = 3
	// The images are on no registry: pinning digests off takes the app container, which every
	// revision here keeps on its image, as already there by its tag.
	fromRollout := func(image string) []map[string]any {
		cfg := stepConfig("web", image, map[string]any{"fromRollout": true, "pinDigests": "never"})
		delete(cfg, "images")
		return []map[string]any{cfg}
	}
	tests := []struct {
		name  string
		steps stepsFunc
		// change makes the new revision: a change of the Rollout's template.
		change func(t *testing.T, ns string, steps stepsFunc) (oldHash string)
		// updated: the Rollout ends Healthy with the sidecar on meshV2; else Degraded, the
		// step's Run Failed saying want, and nothing changed.
		updated bool
		want    []string
	}{
		{
			name:  "a native sidecar's new image is rolled out in place",
			steps: fromRollout,
			change: func(t *testing.T, ns string, _ stepsFunc) string {
				return updateTemplate(t, ns, "web", func(tmpl *corev1.PodTemplateSpec) { tmpl.Spec.InitContainers[1].Image = meshV2 })
			},
			updated: true,
		},
		{
			name:  "a plain init container's new image is refused, not left undone",
			steps: fromRollout,
			change: func(t *testing.T, ns string, _ stepsFunc) string {
				return updateTemplate(t, ns, "web", func(tmpl *corev1.PodTemplateSpec) { tmpl.Spec.InitContainers[0].Image = setupV2 })
			},
			want: []string{`StatefulSet ` + "%NS%" + `/web: init container "setup" runs ` + setupV1, setupV2, "includeInit"},
		},
		{
			name: "a plain init container named in images without includeInit is refused",
			steps: func(image string) []map[string]any {
				return []map[string]any{stepConfig("web", image, map[string]any{"images": map[string]any{"app": image, "setup": setupV2}, "pinDigests": "never"})}
			},
			change: func(t *testing.T, ns string, steps stepsFunc) string {
				return setImage(t, ns, "web", clitest.AppV2, steps)
			},
			want: []string{`"setup" is an init container`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			clitest.CreateStatefulSetWith(t, env, ns, "web", pods, withInits)
			before := map[string]corev1.Pod{}
			for _, p := range clitest.ListPods(t, env, ns, "app=web") {
				before[p.Name] = p
			}
			createRolloutWith(t, ns, "web", clitest.AppV1, tt.steps, withInits)
			old := tt.change(t, ns, tt.steps)
			ro := settledOn(t, ns, "web", old)
			sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			after := clitest.ListPods(t, env, ns, "app=web")
			if len(after) != pods {
				t.Fatalf("%d pods, want %d", len(after), pods)
			}

			if tt.updated {
				if ro.Status.Phase != rolloutsv1alpha1.RolloutPhaseHealthy {
					t.Fatalf("the Rollout is %s, want Healthy: %s", ro.Status.Phase, describeRollout(ro))
				}
				for _, p := range after {
					was := before[p.Name]
					spec, st := initContainer(&p, "mesh")
					_, wasSt := initContainer(&was, "mesh")
					switch {
					case p.UID != was.UID:
						t.Errorf("pod %s was recreated", p.Name)
					case spec == nil || wasSt == nil:
						t.Errorf("pod %s has no init container mesh, or had no status of it", p.Name)
					case spec.Image != meshV2:
						t.Errorf("pod %s: the sidecar's spec is on %s, want %s", p.Name, spec.Image, meshV2)
					case st == nil || st.Image != meshV2 || st.State.Running == nil || !st.Ready || st.RestartCount != wasSt.RestartCount+1 || st.ContainerID == wasSt.ContainerID:
						t.Errorf("pod %s: the sidecar did not restart on %s: status %+v (before: %+v)", p.Name, meshV2, st, wasSt)
					}
					if app := p.Status.ContainerStatuses[0]; app.ContainerID != was.Status.ContainerStatuses[0].ContainerID {
						t.Errorf("pod %s: the app container restarted too", p.Name)
					}
				}
				if img := sts.Spec.Template.Spec.InitContainers[1].Image; img != meshV2 {
					t.Errorf("the StatefulSet's template runs the sidecar on %s, want %s", img, meshV2)
				}
				return
			}

			if ro.Status.Phase != rolloutsv1alpha1.RolloutPhaseDegraded || !ro.Status.Abort {
				t.Errorf("the Rollout is %s (abort %v), want Degraded and aborted: %s", ro.Status.Phase, ro.Status.Abort, describeRollout(ro))
			}
			run := lastRun(ro)
			if run == nil || run.Phase != rolloutsv1alpha1.StepPluginPhaseFailed {
				t.Fatalf("the step's last Run is not Failed: %s", describeRollout(ro))
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "%NS%", ns); !strings.Contains(run.Message, w) {
					t.Errorf("the step's message %q does not say %q", run.Message, w)
				}
			}
			for _, p := range after {
				was := before[p.Name]
				if p.UID != was.UID || p.Spec.Containers[0].Image != clitest.AppV1 || p.Spec.InitContainers[0].Image != setupV1 || p.Spec.InitContainers[1].Image != meshV1 {
					t.Errorf("pod %s changed: %+v", p.Name, p.Spec)
				}
			}
			if lock := sts.Annotations[workload.LockAnnotation]; lock != "" {
				t.Errorf("the StatefulSet carries the lock %s: the refused step wrote to it", lock)
			}
		})
	}
}
