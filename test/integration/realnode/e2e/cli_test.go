package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
)

// A 3-pod StatefulSet on the real node rolled v1 -> v2 by the CLI keeps every pod's UID, IP and
// node, restarts each app container once in a new container on v2's digest; the pods' logs
// come through kube-apiserver, which dials the kubelet by IP, and the pods' only nameserver is
// the node's bridge address, where nothing answers.
func TestStatefulSetInPlace(t *testing.T) {
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")

	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image("v2"), "--batches", "1,100%")
	if r.Code != 0 {
		t.Fatalf("run v2: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	onDigest(t, ns, "app=web", digest(t, "v2"))

	logs, err := env.Client.CoreV1().Pods(ns).GetLogs("web-0", &corev1.PodLogOptions{Container: "app"}).DoRaw(context.Background())
	must(t, err, "reading the logs of %s/web-0 through kube-apiserver", ns)
	if !strings.Contains(string(logs), "realapp: v2 listening") {
		t.Errorf("logs of %s/web-0 do not show v2 starting:\n%s", ns, logs)
	}
	confs := sandboxResolvConfs(t)
	if len(confs) == 0 {
		t.Fatal("containerd wrote no resolv.conf for the real node's pods")
	}
	for _, f := range confs {
		data, err := readFile(f)
		must(t, err, "reading %s", f)
		for _, line := range strings.Split(data, "\n") {
			if w := strings.Fields(line); len(w) > 1 && w[0] == "nameserver" && w[1] != realnode.Gateway {
				t.Errorf("%s names nameserver %s, not the node's bridge %s: a pod's DNS query would leave the machine:\n%s", f, w[1], realnode.Gateway, data)
			}
		}
	}
}

// A crash rolls every pod back to the digest it ran (exit 1), and a rollout started right after
// that rollback succeeds, as does a rollback of it: the kubelet's back-off on an image the pod
// ran minutes ago is waited for, not taken for a failure.
func TestCrashThenRolloutAgain(t *testing.T) {
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	target := []string{"-n", ns, "--target", "statefulset/web"}
	if r := run(t, append([]string{"run", "--image", "app=" + image("v2"), "--batches", "1,100%"}, target...)...); r.Code != 0 {
		t.Fatalf("run v2: %s", r)
	}
	before := identities(t, ns, "app=web")

	r := run(t, append([]string{"run", "--image", "app=" + image("crash1"), "--batches", "1,100%"}, target...)...)
	if r.Code != 1 {
		t.Fatalf("run crash1: want exit 1 (rolled back), got %s", r)
	}
	onDigest(t, ns, "app=web", digest(t, "v2"))
	for name, id := range identities(t, ns, "app=web") {
		if id.UID != before[name].UID || id.IP != before[name].IP {
			t.Errorf("pod %s was recreated by the crash rollback: %+v, was %+v", name, id, before[name])
		}
	}

	if r := run(t, append([]string{"run", "--image", "app=" + image("v3"), "--batches", "1,100%"}, target...)...); r.Code != 0 {
		t.Fatalf("run v3 right after the rollback: %s", r)
	}
	onDigest(t, ns, "app=web", digest(t, "v3"))
	if r := run(t, append([]string{"rollback"}, target...)...); r.Code != 0 {
		t.Fatalf("rollback of v3: %s", r)
	}
	onDigest(t, ns, "app=web", digest(t, "v2"))
}

// A tag that does not exist fails the rollout (exit 1, never 3 "rollback incomplete"), every
// pod is back on its image, and the message names the missing manifest.
func TestMissingTag(t *testing.T) {
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	missing := image("missing1")
	r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+missing, "--pin-digests", "never", "--batches", "1,100%")
	if r.Code != 1 {
		t.Fatalf("run %s: want exit 1, got %s", missing, r)
	}
	if out := r.Stdout + r.Stderr; !strings.Contains(out, "not found") || !strings.Contains(out, "missing1") {
		t.Errorf("the message does not name the missing manifest %s:\n%s", missing, r)
	}
	onDigest(t, ns, "app=web", digest(t, "v1"))
	for name, id := range identities(t, ns, "app=web") {
		if id.UID != before[name].UID || id.IP != before[name].IP {
			t.Errorf("pod %s was recreated: %+v, was %+v", name, id, before[name])
		}
	}
}

// Back-and-forth rollouts, each right after the last: v1 -> v2 -> v3 -> v2 -> v3, every one
// exit 0, every pod restarted once per rollout.
func TestBackAndForth(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	statefulSet(t, ns, "web", 3)
	for _, tag := range []string{"v2", "v3", "v2", "v3"} {
		before := identities(t, ns, "app=web")
		r := run(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image(tag), "--batches", "1,100%")
		if r.Code != 0 {
			t.Fatalf("run %s: %s", tag, r)
		}
		checkInPlace(t, before, identities(t, ns, "app=web"), 1)
		onDigest(t, ns, "app=web", digest(t, tag))
	}
}

// A native sidecar's image rolled out in place by the CLI on a 2-pod StatefulSet on the real
// node: each pod keeps its UID, IP and node, its sidecar restarts once into a new container of
// v2's digest, and its app container keeps its containerID and restartCount.
func TestStatefulSetNativeSidecarInPlace(t *testing.T) {
	full(t)
	ns := env.Namespace(t)
	statefulSetOf(t, ns, "mesh", 2, func(tmpl *corev1.PodTemplateSpec) {
		tmpl.Spec.InitContainers = []corev1.Container{{
			Name: "side", Image: image("v1"), Args: []string{"-listen=:8081"},
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		}}
	})
	before := identities(t, ns, "app=mesh")
	sidecars := sidecarStatuses(t, ns, "app=mesh")

	r := run(t, "run", "-n", ns, "--target", "statefulset/mesh", "--image", "side="+image("v2"), "--batches", "1,100%")
	if r.Code != 0 {
		t.Fatalf("run side=v2: %s", r)
	}
	after := identities(t, ns, "app=mesh")
	checkInPlace(t, before, after, 0)
	d := digest(t, "v2")
	for name, cs := range sidecarStatuses(t, ns, "app=mesh") {
		old := sidecars[name]
		switch {
		case after[name].ContainerID != before[name].ContainerID:
			t.Errorf("pod %s: app container %s, was %s: the sidecar's rollout restarted it", name, after[name].ContainerID, before[name].ContainerID)
		case cs.RestartCount != old.RestartCount+1 || cs.ContainerID == old.ContainerID:
			t.Errorf("pod %s: sidecar restartCount %d -> %d, container %s (was %s); want one restart into a new container", name, old.RestartCount, cs.RestartCount, cs.ContainerID, old.ContainerID)
		case !strings.HasSuffix(cs.ImageID, "@"+d) || cs.State.Running == nil || !cs.Ready:
			t.Errorf("pod %s: sidecar on %s, running %v, ready %v; want %s running and Ready", name, cs.ImageID, cs.State.Running != nil, cs.Ready, d)
		}
	}
}

// sidecarStatuses is the status of the init container side of each pod selector selects, by pod.
func sidecarStatuses(t *testing.T, ns, selector string) map[string]corev1.ContainerStatus {
	t.Helper()
	out := map[string]corev1.ContainerStatus{}
	for _, p := range clitest.ListPods(t, env, ns, selector) {
		out[p.Name] = initStatus(&p, "side")
	}
	return out
}
