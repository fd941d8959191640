package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// ensure runs prepull.Ensure for node as a driver does: the rollout's pullers listed first.
func ensure(t *testing.T, ns, rolloutID, image, node string, opts prepull.Options) (prepull.Phase, string) {
	t.Helper()
	ctx := context.Background()
	existing, err := prepull.List(ctx, env.Client, ns, rolloutID)
	if err != nil {
		t.Fatal(err)
	}
	phases, reasons, err := prepull.Ensure(ctx, env.Client, ns, rolloutID, []string{image}, map[string][]*corev1.Pod{node: nil}, existing, opts)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return phases[node], reasons[node]
}

// firstVerdict watches the puller pod and returns the first status prepull.Judge does not call
// Pulling; a watch sees every status write, so a short ErrImagePull is not missed.
func firstVerdict(t *testing.T, ns, name string) (prepull.Phase, string, *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatalf("watching pod %s/%s: %v", ns, name, err)
	}
	defer w.Stop()
	var last *corev1.Pod
	for ev := range w.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		last = ev.Object.(*corev1.Pod)
		if phase, reason := prepull.Judge(last); phase != prepull.Pulling {
			return phase, reason, last
		}
	}
	t.Fatalf("puller pod %s/%s never left Pulling; last status %+v", ns, name, last)
	return "", "", nil
}

func TestPrePullPutsTheImageOnTheNode(t *testing.T) {
	ns := env.Namespace(t)
	dockerConfig := t.TempDir()
	// A repository of the test's own, so no other test's pull is on the nodes.
	repo := env.Registry + "/" + ns + "/app"
	ref := repo + ":v1"
	opts := prepull.Options{HelperImage: env.Registry + "/" + ns + "/inplace-rollout:test", Deadline: time.Minute}
	pushNew(t, dockerConfig, opts.HelperImage)
	first := pushNew(t, dockerConfig, ref)
	nodes := env.Sim.NodeNames()
	node, other := nodes[0], nodes[1]

	t.Run("a puller pulls onto its node and succeeds", func(t *testing.T) {
		if phase, reason := ensure(t, ns, "r1", ref, node, opts); phase != prepull.Pulling || reason != "" {
			t.Fatalf("Ensure on a node without a puller: %s %q; want Pulling", phase, reason)
		}
		name := prepull.Name("r1", node)
		pod := env.WaitForPod(t, ns, name, 2*time.Minute, "Succeeded", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if pod.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("puller pod %s: phase %s (%s: %s); want Succeeded", name, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
		}
		if cs := cluster.ContainerStatus(pod, "pull-0"); cs == nil || cs.ImageID != repo+"@"+first {
			t.Errorf("puller's pull-0 status %+v; want imageID %s", cs, repo+"@"+first)
		}
		if phase, reason := ensure(t, ns, "r1", ref, node, opts); phase != prepull.Pulled {
			t.Errorf("Ensure after the puller succeeded: %s %q; want Pulled", phase, reason)
		}
	})

	// New content under the same tag: a pod with IfNotPresent uses the node's copy, so the
	// content the puller pulled is what a pod on that node starts, and another node pulls anew.
	second := pushNew(t, dockerConfig, ref)
	for _, tt := range []struct{ name, pod, node, want string }{
		{"a pod on the puller's node starts what the puller pulled", "on-pulled-node", node, first},
		{"a pod on another node pulls the tag's content now", "on-other-node", other, second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			createPod(t, ns, tt.pod, ref, corev1.PullIfNotPresent, tt.node)
			if id, _ := readyImageID(t, ns, tt.pod); id != repo+"@"+tt.want {
				t.Errorf("imageID = %q; want %q (pulled by the puller %s, pushed since %s)", id, repo+"@"+tt.want, first, second)
			}
		})
	}

	t.Run("a puller of a missing image fails with manifest unknown", func(t *testing.T) {
		missing := repo + ":does-not-exist"
		if phase, _ := ensure(t, ns, "r2", missing, node, opts); phase != prepull.Pulling {
			t.Fatalf("Ensure: %s; want Pulling", phase)
		}
		phase, reason, pod := firstVerdict(t, ns, prepull.Name("r2", node))
		if phase != prepull.Failed || !strings.Contains(reason, "manifest unknown") || !strings.Contains(reason, missing) || !strings.Contains(reason, node) {
			t.Errorf("Judge = %s %q; want Failed naming %s, node %s and manifest unknown", phase, reason, missing, node)
		}
		if pod.Status.Phase != corev1.PodPending {
			t.Errorf("puller pod phase %s; want Pending while its pull fails", pod.Status.Phase)
		}
	})

	t.Run("Cleanup deletes every puller", func(t *testing.T) {
		n, err := prepull.Cleanup(context.Background(), env.Client, ns, "")
		if err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		if n != 2 {
			t.Errorf("Cleanup deleted %d pods; want 2", n)
		}
		cluster.WaitFor(t, time.Minute, "no puller pod left", func(ctx context.Context) (bool, error) {
			pods, err := prepull.List(ctx, env.Client, ns, "")
			return err == nil && len(pods) == 0, err
		})
		for _, name := range []string{"on-pulled-node", "on-other-node"} {
			if _, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
				t.Errorf("pod %s after Cleanup: %v; want it kept", name, err)
			}
		}
	})
}
