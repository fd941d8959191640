package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// image is the real app image with tag on the cluster's registry.
func image(tag string) string { return env.AppImage(tag) }

// digest is the manifest digest the registry holds for the app image with tag.
func digest(t testing.TB, tag string) string {
	t.Helper()
	d, ok := env.Images[image(tag)]
	if !ok {
		t.Fatalf("no app image %s was pushed", image(tag))
	}
	return d
}

// template is a pod template for the real node: the real app on v1, ready when it answers
// /healthz, a short grace period.
func template(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: env.RealNode.Name},
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: image("v1"),
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// statefulSet creates a StatefulSet of template pods on the real node and waits until every
// replica is Ready.
func statefulSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	statefulSetOf(t, ns, name, replicas, nil)
}

// statefulSetOf is statefulSet with the template changed by mutate first, when not nil.
func statefulSetOf(t *testing.T, ns, name string, replicas int32, mutate func(*corev1.PodTemplateSpec)) {
	t.Helper()
	labels := map[string]string{"app": name}
	tmpl := template(labels)
	if mutate != nil {
		mutate(&tmpl)
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating StatefulSet %s/%s: %v", ns, name, err)
	}
	clitest.WaitStatefulSet(t, env, ns, name, "every replica Ready on the real node", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == replicas && s.Status.UpdatedReplicas == replicas
	})
}

// identity is what an in-place update must keep of a pod, and what it changes.
type identity struct {
	UID, IP, Node string
	Restarts      int32
	ContainerID   string
	ImageID       string
}

func identities(t *testing.T, ns, selector string) map[string]identity {
	t.Helper()
	out := map[string]identity{}
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		id := identity{UID: string(p.UID), IP: p.Status.PodIP, Node: p.Spec.NodeName}
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			id.Restarts, id.ContainerID, id.ImageID = cs.RestartCount, cs.ContainerID, cs.ImageID
		}
		out[p.Name] = id
	}
	return out
}

// checkInPlace fails unless every pod kept its UID, IP and node, the real node, and its app
// container was restarted exactly restarts times, in a new container.
func checkInPlace(t *testing.T, before, after map[string]identity, restarts int32) {
	t.Helper()
	checkInPlaceOn(t, env.RealNode.Name, before, after, restarts)
}

// checkInPlaceOn is checkInPlace for pods on node.
func checkInPlaceOn(t *testing.T, node string, before, after map[string]identity, restarts int32) {
	t.Helper()
	if len(after) != len(before) {
		t.Fatalf("%d pods before, %d after", len(before), len(after))
	}
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("pod %s is gone", name)
		case a.UID != b.UID || a.IP != b.IP || a.Node != b.Node:
			t.Errorf("pod %s was recreated or moved: before %+v, after %+v", name, b, a)
		case a.Node != node:
			t.Errorf("pod %s runs on %s, not on %s", name, a.Node, node)
		case a.Restarts-b.Restarts != restarts:
			t.Errorf("pod %s: app restarted %d times, want %d", name, a.Restarts-b.Restarts, restarts)
		case restarts > 0 && a.ContainerID == b.ContainerID:
			t.Errorf("pod %s: app still runs container %s", name, a.ContainerID)
		}
	}
}

// onDigest fails unless every pod's app container runs the image with digest, Ready.
func onDigest(t *testing.T, ns, selector, digest string) {
	t.Helper()
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		cs := cluster.ContainerStatus(&p, "app")
		if cs == nil || !strings.HasSuffix(cs.ImageID, "@"+digest) || cs.State.Running == nil || !cs.Ready {
			t.Errorf("pod %s: app is not running %s, Ready: %+v", p.Name, digest, cs)
		}
	}
}

// run runs the CLI and returns its result.
func run(t testing.TB, args ...string) clitest.Result {
	t.Helper()
	start := time.Now()
	r := clitest.Run(t, env, cli, args...)
	t.Logf("inplace-rollout %s: exit %d in %s", strings.Join(args, " "), r.Code, time.Since(start).Round(time.Millisecond))
	return r
}

// sandboxResolvConfs lists the resolv.conf files containerd wrote for the real node's pods.
func sandboxResolvConfs(t *testing.T) []string {
	t.Helper()
	var files []string
	root := filepath.Join(env.Dir, "realnode", "containerd")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "resolv.conf" {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return files
}

func must(t testing.TB, err error, doing string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(doing, args...), err)
	}
}

func readFile(p string) (string, error) {
	data, err := os.ReadFile(p)
	return string(data), err
}
