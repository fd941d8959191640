package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const (
	appV1 = "registry.example/app:v1"
	appV2 = "registry.example/app:v2"
	appV3 = "registry.example/app:v3"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs inplace-rollout against the test cluster.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(cli, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", args, err)
	}
	return result{code, out.String(), errOut.String()}
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + lastLines(r.stderr, 15)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func template(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: appV1},
			{Name: "sidecar", Image: "registry.example/sidecar:v1"},
		}},
	}
}

func createStatefulSet(t *testing.T, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels),
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset: %v", err)
	}
	return waitStatefulSet(t, ns, name, "all replicas ready and updated", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == replicas && s.Status.UpdatedReplicas == replicas
	})
}

func waitStatefulSet(t *testing.T, ns, name, what string, cond func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
	t.Helper()
	var got *appsv1.StatefulSet
	cluster.WaitFor(t, 60*time.Second, "statefulset "+name+": "+what, func(ctx context.Context) (bool, error) {
		s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = s
		return cond(s), nil
	})
	return got
}

func listPods(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	return list.Items
}

// identity is what must not change about a pod updated in place.
type identity struct {
	uid, ip, node string
	restarts      map[string]int32
	imageIDs      map[string]string
}

func identities(t *testing.T, ns, selector string) map[string]identity {
	t.Helper()
	out := map[string]identity{}
	for _, p := range listPods(t, ns, selector) {
		id := identity{uid: string(p.UID), ip: p.Status.PodIP, node: p.Spec.NodeName, restarts: map[string]int32{}, imageIDs: map[string]string{}}
		for _, cs := range p.Status.ContainerStatuses {
			id.restarts[cs.Name] = cs.RestartCount
			id.imageIDs[cs.Name] = cs.ImageID
		}
		out[p.Name] = id
	}
	return out
}

// checkInPlace checks that every pod kept its UID, IP and node, and that the app container
// restarted appRestarts times and the sidecar never.
func checkInPlace(t *testing.T, before, after map[string]identity, appRestarts int32) {
	t.Helper()
	if len(after) != len(before) {
		t.Fatalf("%d pods after, %d before", len(after), len(before))
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Errorf("pod %s is gone", name)
			continue
		}
		if a.uid != b.uid || a.ip != b.ip || a.node != b.node {
			t.Errorf("pod %s was recreated or moved: UID %s->%s IP %s->%s node %s->%s", name, b.uid, a.uid, b.ip, a.ip, b.node, a.node)
		}
		if got := a.restarts["app"] - b.restarts["app"]; got != appRestarts {
			t.Errorf("pod %s: app restarted %d times, want %d", name, got, appRestarts)
		}
		if a.restarts["sidecar"] != b.restarts["sidecar"] {
			t.Errorf("pod %s: sidecar restarted", name)
		}
	}
}

func podsOnImage(t *testing.T, ns, selector, image string) {
	t.Helper()
	for _, p := range listPods(t, ns, selector) {
		cs := cluster.ContainerStatus(&p, "app")
		if p.Spec.Containers[0].Image != image || cs == nil || cs.State.Running == nil || !cluster.PodReady(&p) {
			t.Errorf("pod %s: spec %s, status %+v, ready %v; want Running and Ready on %s", p.Name, p.Spec.Containers[0].Image, cs, cluster.PodReady(&p), image)
		}
	}
}

func stateOf(t *testing.T, p *corev1.Pod) *inplace.State {
	t.Helper()
	st, err := inplace.ReadState(p)
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return st
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func jsonString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
