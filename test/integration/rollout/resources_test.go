package rollout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// withResources gives the template's app container CPU and memory requests and limits, and
// resizes CPU without a restart and memory with one.
func withResources(tmpl *corev1.PodTemplateSpec) {
	app := &tmpl.Spec.Containers[0]
	app.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	app.ResizePolicy = []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
	}
}

// createResizable creates a StatefulSet of replicas withResources pods labelled app=NAME and
// waits until every replica is Ready.
func createResizable(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	tmpl := template(labels)
	withResources(&tmpl)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To(replicas), PodManagementPolicy: appsv1.ParallelPodManagement, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
	_, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	must(t, err)
	waitStatefulSet(t, ns, name, "every replica Ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == replicas && s.Status.UpdatedReplicas == replicas
	})
}

// resourcesFile writes an InPlaceRollout of target (KIND/NAME, or pods) that sets resources (a
// YAML map of containers), and returns its path.
func resourcesFile(t *testing.T, kind, name, resources string) string {
	t.Helper()
	target := fmt.Sprintf("{kind: %s, name: %s}", kind, name)
	if kind == "Pods" {
		target = fmt.Sprintf("{kind: Pods, selector: %q}", name)
	}
	file := filepath.Join(t.TempDir(), "rollout.yaml")
	doc := fmt.Sprintf("apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec:\n  target: %s\n  resources: %s\n  batches: [1, \"100%%\"]\n", target, resources)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// CPU rolled out in place on every workload kind: no container restarts, every pod kept, the
// kubelet reports the new values, and the template carries them, so that nothing is recreated
// afterwards.
func TestResourcesOnEveryKind(t *testing.T) {
	const cpu = "{app: {requests: {cpu: 150m}, limits: {cpu: 300m}}}"
	tests := []struct {
		kind, name string
		create     func(t *testing.T, ns string)
		template   func(t *testing.T, ns string) []corev1.PodTemplateSpec
	}{
		{"StatefulSet", "web", func(t *testing.T, ns string) {
			createResizable(t, ns, "web", 3)
		}, func(t *testing.T, ns string) []corev1.PodTemplateSpec {
			s := waitStatefulSet(t, ns, "web", "its current revision the update revision, every replica on it", func(s *appsv1.StatefulSet) bool {
				return s.Status.ObservedGeneration == s.Generation && s.Status.CurrentRevision == s.Status.UpdateRevision && s.Status.UpdatedReplicas == 3
			})
			return []corev1.PodTemplateSpec{s.Spec.Template}
		}},
		{"DaemonSet", "agent", func(t *testing.T, ns string) {
			labels := map[string]string{"app": "agent"}
			tmpl := template(labels)
			withResources(&tmpl)
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
			_, err := env.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{})
			must(t, err)
			nodes := int32(len(env.Sim.NodeNames()))
			waitDaemonSet(t, ns, "agent", func(d *appsv1.DaemonSet) bool {
				return d.Status.NumberReady == nodes && d.Status.UpdatedNumberScheduled == nodes
			})
		}, func(t *testing.T, ns string) []corev1.PodTemplateSpec {
			nodes := int32(len(env.Sim.NodeNames()))
			d := waitDaemonSet(t, ns, "agent", func(d *appsv1.DaemonSet) bool {
				return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedNumberScheduled == nodes && d.Status.NumberReady == nodes
			})
			return []corev1.PodTemplateSpec{d.Spec.Template}
		}},
		{"Deployment", "api", func(t *testing.T, ns string) {
			labels := map[string]string{"app": "api"}
			tmpl := template(labels)
			withResources(&tmpl)
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns}, Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
			_, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{})
			must(t, err)
			waitDeployment(t, ns, "api", 3)
		}, func(t *testing.T, ns string) []corev1.PodTemplateSpec {
			d := waitDeployment(t, ns, "api", 3)
			if d.Spec.Paused {
				t.Errorf("Deployment api is still paused")
			}
			sets, err := env.Client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=api"})
			must(t, err)
			out := []corev1.PodTemplateSpec{d.Spec.Template}
			for _, rs := range sets.Items {
				if ptr.Deref(rs.Spec.Replicas, 0) > 0 {
					out = append(out, rs.Spec.Template)
				}
			}
			if len(out) != 2 {
				t.Errorf("%d ReplicaSets of Deployment api have replicas, want 1", len(out)-1)
			}
			return out
		}},
		{"Pods", "app=loose", func(t *testing.T, ns string) {
			for i := range 2 {
				tmpl := template(map[string]string{"app": "loose"})
				withResources(&tmpl)
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("loose-%d", i), Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
				_, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
				must(t, err)
				env.WaitForPod(t, ns, pod.Name, 60*time.Second, "Ready", cluster.PodReady)
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			tt.create(t, ns)
			selector := "app=" + tt.name
			if tt.kind == "Pods" {
				selector = tt.name
			}
			before := identities(t, ns, selector)
			if r := runCLI(t, "run", "-n", ns, "-f", resourcesFile(t, tt.kind, tt.name, cpu)); r.Code != 0 {
				t.Fatalf("run: %s", r)
			}
			if tt.template != nil {
				for _, tmpl := range tt.template(t, ns) {
					if r := tmpl.Spec.Containers[0].Resources; r.Requests.Cpu().String() != "150m" || r.Limits.Cpu().String() != "300m" || r.Limits.Memory().String() != "128Mi" {
						t.Errorf("template resources %v, want cpu 150m/300m and memory as it was", r)
					}
				}
			}
			// A pod recreated by its controller would show here, after the strategy is back.
			time.Sleep(2 * time.Second)
			checkInPlace(t, before, identities(t, ns, selector), 0)
			for _, p := range listPods(t, ns, selector) {
				cs := p.Status.ContainerStatuses[0]
				if cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "150m" || cs.Resources.Limits.Cpu().String() != "300m" {
					t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu 150m/300m", p.Name, cs.Resources)
				}
			}
		})
	}
}

// Resources a resize cannot take are refused before anything is written, with a message that
// names the container and the value.
func TestBadResourcesChangeNothing(t *testing.T) {
	ns := env.Namespace(t)
	createResizable(t, ns, "web", 2)
	for _, tt := range []struct{ name, resources, want string }{
		{"a limit below the request", "{app: {limits: {cpu: 50m}}}", "cpu limit 50m is below its request 100m"},
		{"a value the container does not declare", "{sidecar: {requests: {cpu: 100m}}}", `container "sidecar": requests.cpu: the container declares no cpu request`},
		{"not cpu or memory", "{app: {limits: {ephemeral-storage: 1Gi}}}", "only cpu and memory change in place"},
		{"no such container", "{db: {requests: {cpu: 1}}}", `no container named "db"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rvs := resourceVersions(t, ns)
			r := runCLI(t, "run", "-n", ns, "-f", resourcesFile(t, "StatefulSet", "web", tt.resources))
			if r.Code != 2 || !contains(r.Stderr, tt.want) {
				t.Fatalf("run: exit %d, want 2 with %q: %s", r.Code, tt.want, r)
			}
			if !equalMaps(rvs, resourceVersions(t, ns)) {
				t.Errorf("a refused rollout wrote to the cluster")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A rollout of an image and resources killed with SIGKILL at random moments, then run again to
// its end: every pod resized and on the new image, each container restarted exactly twice (once
// by its memory resize, whose policy is RestartContainer, once by its image), none recreated.
func TestKilledResizeResumes(t *testing.T) {
	ns := env.Namespace(t)
	createResizable(t, ns, "web", 6)
	before := identities(t, ns, "app=web")
	file := resourcesFile(t, "StatefulSet", "web", "{app: {requests: {cpu: 150m, memory: 80Mi}, limits: {memory: 160Mi}}}")
	args := []string{"run", "-n", ns, "-f", file, "--image", "app=" + appV2, "--batches", "2,50%,100%", "--max-unavailable", "2"}

	killed := killRuns(t, ns, args, 15, rand.New(rand.NewPCG(3, 5)), 150*time.Millisecond, nil)
	if killed == 0 {
		t.Fatal("no run was killed mid-way: the test exercised nothing")
	}
	if r := runCLI(t, args...); r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	t.Logf("%d of 15 runs killed before they finished", killed)
	checkInPlace(t, before, identities(t, ns, "app=web"), 2)
	podsOnImage(t, ns, "app=web", appV2)
	for _, p := range listPods(t, ns, "app=web") {
		cs := p.Status.ContainerStatuses[0]
		if cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "150m" || cs.Resources.Requests.Memory().String() != "80Mi" || cs.Resources.Limits.Memory().String() != "160Mi" {
			t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu request 150m, memory 80Mi/160Mi", p.Name, cs.Resources)
		}
	}
}
