package rollout_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// TestPodCrashingBeforeTheUpdateIsReportedNotBlamed has web-1 crash-looping before the rollout
// (on v1) and after it (on v2): run --allow-unready must not fail the rollout for it nor roll the
// healthy pods back. web-1 is left on the new image, reported and counted apart, and the
// rollout succeeds with the others.
func TestPodCrashingBeforeTheUpdateIsReportedNotBlamed(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "web-1", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+kubeletsim.CrashImagesAnnotation+`":"`+appV1+","+appV2+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "web-1", 30*time.Second, "CrashLoopBackOff", func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
	})
	before := identities(t, ns, "app=web")

	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,100%",
		"--allow-unready", "--timeout", "30s", "-o", "json")
	if r.Code != 0 || !contains(r.Stdout, `"unhealthy": 1`) || !contains(r.Stdout, "web-1") {
		t.Fatalf("run: %s\nwant exit 0, web-1 reported and counted as unhealthy", r)
	}
	for _, p := range listPods(t, ns, "app=web") {
		st := stateOf(t, &p)
		if st == nil || inplace.Judged(&p, st, time.Now()) != inplace.StageUpdated || p.Spec.Containers[0].Image != appV2 {
			t.Errorf("pod %s: state %+v on %s, want Updated on %s", p.Name, st, p.Spec.Containers[0].Image, appV2)
			continue
		}
		if b := before[p.Name]; string(p.UID) != b.uid {
			t.Errorf("pod %s was recreated", p.Name)
		}
		if p.Name != "web-1" && !cluster.PodReady(&p) {
			t.Errorf("pod %s not Ready", p.Name)
		}
		// The update's end is not written: the pod's stage and reason, as status reports them,
		// are judged from it.
		if _, why := inplace.JudgedReason(&p, st, time.Now()); p.Name == "web-1" && !contains(why, "before the update") {
			t.Errorf("web-1: reason %q, want it to say the container was failing before the update", why)
		}
	}
}
