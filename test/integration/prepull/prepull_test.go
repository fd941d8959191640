package prepull

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// push writes new content under ref on the cluster's registry and returns its digest.
func push(t testing.TB, ref string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, _ := img.Digest()
	return d.String()
}

// statefulSet creates a StatefulSet of n pods with one container on image and waits until they
// are Ready.
func statefulSet(t testing.TB, ns, name, image string, n int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(n), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating statefulset: %v", err)
	}
	clitest.WaitStatefulSet(t, env, ns, name, "all replicas ready", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == n && s.Status.UpdatedReplicas == n
	})
}

// restarts are the app container's restart counts, by pod.
func restarts(t testing.TB, ns, name string) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "app" {
				out[p.Name] = cs.RestartCount
			}
		}
	}
	return out
}

// noPullers fails t when a puller pod is left in ns.
func noPullers(t testing.TB, ns, when string) {
	t.Helper()
	left, err := prepull.List(context.Background(), env.Client, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%s: %d puller pods left, e.g. %s on %s", when, len(left), left[0].Name, left[0].Spec.NodeName)
	}
}

// TestPrePullFinishesAndRemovesPullers: a rollout with --pre-pull updates every pod in place
// onto the pinned image and leaves no puller pod.
func TestPrePullFinishesAndRemovesPullers(t *testing.T) {
	ns := env.Namespace(t)
	repo := env.Registry + "/" + ns + "/app" // its own repository: nodes keep what earlier tests pulled by tag
	push(t, repo+":v1")
	v2 := push(t, repo+":v2")
	statefulSet(t, ns, "web", repo+":v1", 4)
	before := restarts(t, ns, "web")
	r := clitest.Run(t, env, cli, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":v2",
		"--batches", "1,50%,100%", "--pre-pull", "--timeout", "2m")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		if img := p.Spec.Containers[0].Image; img != repo+":v2@"+v2 {
			t.Errorf("pod %s runs %s, want the pinned v2", p.Name, img)
		}
		if got := restarts(t, ns, "web")[p.Name]; got != before[p.Name]+1 {
			t.Errorf("pod %s restarted %d times, want once", p.Name, got-before[p.Name])
		}
	}
	noPullers(t, ns, "after the rollout")
}

// TestPrePullOfAMissingImage: an image that does not exist fails the rollout before any pod
// restarts. Pinned (the default), the registry says so at the start (exit 2); unpinned, the
// pullers fail and the rollout rolls back (exit 1). Either way no restart count moves and no
// puller is left.
func TestPrePullOfAMissingImage(t *testing.T) {
	for _, tt := range []struct {
		pin  string
		code int
		says string
	}{
		{"auto", 2, "no such image"},
		{"never", 1, "PrePullFailed"},
	} {
		t.Run(tt.pin, func(t *testing.T) {
			ns := env.Namespace(t)
			repo := env.Registry + "/" + ns + "/app" // its own repository: nodes keep what earlier tests pulled by tag
			push(t, repo+":v1")
			statefulSet(t, ns, "web", repo+":v1", 3)
			before := restarts(t, ns, "web")
			r := clitest.Run(t, env, cli, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":missing",
				"--pre-pull", "--pin-digests", tt.pin, "--timeout", "2m", "-o", "json")
			if r.Code != tt.code || !strings.Contains(r.Stdout+r.Stderr, tt.says) {
				t.Fatalf("run: %s; want exit %d saying %q", r, tt.code, tt.says)
			}
			if tt.code == 1 && !strings.Contains(r.Stdout+r.Stderr, "manifest unknown") {
				t.Errorf("run: %s; want the failed pull's cause", r)
			}
			if after := restarts(t, ns, "web"); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("restart counts %v, want %v", after, before)
			}
			noPullers(t, ns, "after the failed rollout")
		})
	}
}

// TestPrePullKilledThenRolledBack: the command is killed (SIGKILL) while pullers exist; rollback
// puts every pod back and removes them.
func TestPrePullKilledThenRolledBack(t *testing.T) {
	ns := env.Namespace(t)
	repo := env.Registry + "/" + ns + "/app" // its own repository: nodes keep what earlier tests pulled by tag
	push(t, repo+":v1")
	push(t, repo+":v2")
	statefulSet(t, ns, "web", repo+":v1", 4)
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+repo+":v2",
		"--batches", "1,50%,100%", "--pre-pull", "--soak", "5m", "--timeout", "10m")
	cluster.WaitFor(t, 90*time.Second, "a puller pod and the first batch updated", func(ctx context.Context) (bool, error) {
		pullers, err := prepull.List(ctx, env.Client, ns, "")
		if err != nil || len(pullers) == 0 {
			return false, err
		}
		for _, p := range clitest.ListPods(t, env, ns, "app=web") {
			if s, _ := inplace.ReadState(&p); s != nil && inplace.Judged(&p, s, time.Now()) == inplace.StageUpdated {
				return true, nil
			}
		}
		return false, nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left, _ := prepull.List(context.Background(), env.Client, ns, ""); len(left) == 0 {
		t.Fatal("no puller pod left by the killed command: the test shows nothing")
	}
	r := clitest.Run(t, env, cli, "rollback", "-n", ns, "--target", "statefulset/web")
	if r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		if img := p.Spec.Containers[0].Image; img != repo+":v1" {
			t.Errorf("pod %s on %s after the rollback, want %s:v1", p.Name, img, repo)
		}
	}
	noPullers(t, ns, "after the rollback")
}
