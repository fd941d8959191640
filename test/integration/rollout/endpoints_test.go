package rollout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// gatedTemplate is the test template with the inplace-rollout.io/ready readiness gate.
func gatedTemplate(labels map[string]string) corev1.PodTemplateSpec {
	tmpl := template(labels)
	tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	return tmpl
}

// createGatedStatefulSet creates a StatefulSet of gated pods without waiting for them.
func createGatedStatefulSet(t *testing.T, ns, name string, replicas int32, policy appsv1.PodManagementPolicyType) {
	t.Helper()
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), ServiceName: name, PodManagementPolicy: policy,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: gatedTemplate(labels),
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset %s: %v", name, err)
	}
}

// endpointReady returns, per pod, whether the pod's endpoint in the slices is ready; a pod
// absent from every slice is not in the map.
func endpointReady(slices []discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			// A nil ready condition means unknown, which consumers treat as ready.
			out[ep.TargetRef.Name] = ep.Conditions.Ready == nil || *ep.Conditions.Ready
		}
	}
	return out
}

// TestDrainThroughTheReadinessGateLeavesTheService rolls out a StatefulSet whose template
// declares the readiness gate, behind a Service, and watches the Service's EndpointSlices: each
// pod's endpoint must turn not-ready while the pod still runs its old image (drained before the
// restart), and ready again only once the pod runs the new image, with the gate controller
// running meanwhile.
func TestDrainThroughTheReadinessGateLeavesTheService(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
	createGatedStatefulSet(t, ns, "web", 2, appsv1.ParallelPodManagement)
	// The gate is set by hand here, so that this test depends on the endpoint controllers only.
	gateTrue := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, inplace.ReadinessGate)
	for _, name := range []string{"web-0", "web-1"} {
		env.WaitForPod(t, ns, name, 30*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(gateTrue), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("setting the gate of %s: %v", name, err)
		}
	}

	selector := discoveryv1.LabelServiceName + "=web"
	var resourceVersion string
	cluster.WaitFor(t, 30*time.Second, "the EndpointSlice of service web listing web-0 and web-1 ready", func(ctx context.Context) (bool, error) {
		list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		got := endpointReady(list.Items)
		resourceVersion = list.ResourceVersion
		if len(list.Items) == 0 {
			return false, errors.New("no EndpointSlice for the service")
		}
		if !got["web-0"] || !got["web-1"] {
			return false, fmt.Errorf("endpoints ready: %v", got)
		}
		return true, nil
	})
	w, err := env.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: resourceVersion})
	if err != nil {
		t.Fatalf("watching EndpointSlices: %v", err)
	}
	defer w.Stop()

	// The gate controller runs through the rollout: it must leave a drained pod's gate to the
	// engine, or the pod would come back into the Service before its restart.
	env.StartGateController(t, ns)
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2,
		"--batches", "1,100%", "--grace", "3s")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	slices := map[string]discoveryv1.EndpointSlice{}
	ready := map[string]bool{"web-0": true, "web-1": true}
	drained, back := map[string]bool{}, map[string]bool{}
	timeout := time.After(90 * time.Second)
	for len(back) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the EndpointSlice watch ended; drained %v, back %v", drained, back)
			}
			s, isSlice := ev.Object.(*discoveryv1.EndpointSlice)
			if !isSlice {
				t.Fatalf("EndpointSlice watch: %s event %T: %v", ev.Type, ev.Object, ev.Object)
			}
			if ev.Type == watch.Deleted {
				delete(slices, s.Name)
			} else {
				slices[s.Name] = *s
			}
			var all []discoveryv1.EndpointSlice
			for _, s := range slices {
				all = append(all, s)
			}
			now := endpointReady(all)
			for _, name := range []string{"web-0", "web-1"} {
				if now[name] == ready[name] {
					continue
				}
				ready[name] = now[name]
				// Read the pod after the endpoint changed: what it shows happened no earlier.
				pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				st := stateOf(t, pod)
				stage := inplace.Stage("none")
				if st != nil {
					stage = st.Stage
				}
				image := pod.Spec.Containers[0].Image
				if !now[name] {
					if stage != inplace.StageDraining || image != appV1 {
						t.Fatalf("pod %s left the Service's ready endpoints in stage %s on image %s; want it drained (Draining) while still on %s", name, stage, image, appV1)
					}
					t.Logf("%s: endpoint not ready while draining on %s", name, image)
					drained[name] = true
					continue
				}
				// The engine sets the gate True once the new container runs Ready, and counts the
				// pod Updated once the pod is Ready after that: the endpoint comes back in between.
				if !drained[name] || image != appV2 || !(stage == inplace.StageUpdated || stage == inplace.StageUpdating && newContainerReady(pod, st)) {
					t.Fatalf("pod %s endpoint ready again in stage %s on image %s (drained before: %v); want it back only once a new container runs Ready on %s",
						name, stage, image, drained[name], appV2)
				}
				t.Logf("%s: endpoint ready again, %s on %s", name, stage, image)
				back[name] = true
			}
		case err := <-exited:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			exited = nil
			if err != nil {
				t.Fatalf("run exited early: %v\n%s", err, clitest.LastLines(stderr.String(), 15))
			}
		case <-timeout:
			t.Fatalf("after 90s: drained %v, back %v; CLI stderr:\n%s", drained, back, clitest.LastLines(stderr.String(), 15))
		}
	}
	if exited != nil {
		if err := <-exited; err != nil {
			t.Fatalf("run: %v\n%s", err, clitest.LastLines(stderr.String(), 15))
		}
	}
}

// newContainerReady reports whether the pod's app container is not the one the image patch
// replaced, and runs Ready on another image than before the update.
func newContainerReady(pod *corev1.Pod, st *inplace.State) bool {
	cs := cluster.ContainerStatus(pod, "app")
	if cs == nil || st == nil || len(st.Containers) == 0 {
		return false
	}
	c := st.Containers[0]
	return cs.ContainerID != c.FromContainerID && cs.State.Running != nil && cs.Ready && cs.ImageID != c.BeforeImageID
}
