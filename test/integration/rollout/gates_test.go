package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// TestBatchWhosePodsCannotStartFailsItsDeadline selects two bare pods, the second pinned to a
// node that does not exist: it never gets scheduled, so the second batch cannot start, and the
// rollout fails its progress deadline and rolls the first pod back.
func TestBatchWhosePodsCannotStartFailsItsDeadline(t *testing.T) {
	ns := env.Namespace(t)
	tmpl := template(map[string]string{"app": "mixed"})
	for _, name := range []string{"a-ok", "b-stuck"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		if name == "b-stuck" {
			pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"nowhere"}}},
				}}},
			}}
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.WaitForPod(t, ns, "a-ok", 30*time.Second, "Ready", cluster.PodReady)
	before := identities(t, ns, "app=mixed")

	start := time.Now()
	r := runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", "app=mixed", "--image", "app="+appV2,
		"--batches", "1,100%", "--timeout", "5s", "--allow-unready")
	if r.Code != 1 || !contains(r.Stdout+r.Stderr, "ProgressDeadlineExceeded: batch 2/2 made no progress within 5s") ||
		!contains(r.Stdout+r.Stderr, "b-stuck") || !contains(r.Stdout+r.Stderr, "not scheduled") {
		t.Fatalf("run: %s\nwant exit 1, the batch's progress deadline naming b-stuck and why", r)
	}
	t.Logf("the rollout failed its 5s deadline and rolled back in %s", time.Since(start).Round(100*time.Millisecond))
	pods := listPods(t, ns, "app=mixed")
	for _, p := range pods {
		if p.Spec.Containers[0].Image == appV2 {
			t.Errorf("pod %s left on %s", p.Name, appV2)
		}
	}
	after := identities(t, ns, "app=mixed")
	if a, b := after["a-ok"], before["a-ok"]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] || a.restarts["app"] != b.restarts["app"]+2 {
		t.Errorf("a-ok: %+v, want the same pod back on digest %s after two restarts (update, revert)", a, b.imageIDs["app"])
	}
}

// TestPodCrashingDuringTheSoakFailsTheBatch makes the first updated pod's new image crash while
// its batch soaks: the rollout must not go on to the next batch, and rolls back.
func TestPodCrashingDuringTheSoakFailsTheBatch(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,100%", "--soak", "30s")

	// Batches take web-2 first. Once it is Updated, its batch soaks: crash it then.
	env.WaitForPod(t, ns, "web-2", 60*time.Second, "Updated", func(p *corev1.Pod) bool {
		st, _ := inplace.ReadState(p)
		return st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
	})
	crashedAt := time.Now()
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "web-2", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+kubeletsim.CrashImagesAnnotation+`":"`+appV2+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	// The update's end was judged from the pod, not written: the crash fails web-2's update, and
	// the rollout rolls back on it.
	if code := cmd.ProcessState.ExitCode(); code != 1 || !contains(stderr.String(), "pod web-2: CrashLoopBackOff") {
		t.Fatalf("run exited %d (%v), want 1 and web-2's crash named:\n%s", code, err, clitest.LastLines(stderr.String(), 20))
	}
	t.Logf("the crash during the soak was caught and rolled back %s later", time.Since(crashedAt).Round(100*time.Millisecond))
	for _, p := range listPods(t, ns, "app=web") {
		st := stateOf(t, &p)
		switch {
		case p.Name == "web-2" && (st == nil || st.Stage != inplace.StageRolledBack):
			t.Errorf("web-2: state %+v, want RolledBack", st)
		case p.Name != "web-2" && st != nil:
			t.Errorf("pod %s was touched (stage %s): the next batch started during the soak", p.Name, st.Stage)
		}
		if p.Spec.Containers[0].Image == appV2 {
			t.Errorf("pod %s left on %s", p.Name, appV2)
		}
	}
	for name, a := range identities(t, ns, "app=web") {
		if b := before[name]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s, imageID %s->%s; want the same pod back on its digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
		}
	}
}

// TestSoakLongerThanTheTimeoutIsNotAStall soaks each batch longer than the progress deadline:
// waiting out a soak is progress, and the next batch starts after it.
func TestSoakLongerThanTheTimeoutIsNotAStall(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	before := identities(t, ns, "app=web")
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,100%", "--soak", "3s", "--timeout", "2s")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
}

// TestSupersedingBackToTheRunningImageLiftsTheDrain stops a rollout while its first pod is
// drained behind the readiness gate, then supersedes it with the image the pods still run: the
// drained pod must get its gate back and become Ready, not stay out of its Service.
func TestSupersedingBackToTheRunningImageLiftsTheDrain(t *testing.T) {
	ns := env.Namespace(t)
	tmpl := template(map[string]string{"app": "gated"})
	tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	gateTrue := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, inplace.ReadinessGate)
	for _, name := range []string{"gated-a", "gated-b"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, name, 30*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(gateTrue), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
	}
	args := []string{"-n", ns, "--target", "pods", "--selector", "app=gated", "--batches", "1,100%"}

	cmd := startCLI(t, append([]string{"run", "--image", "app=" + appV2, "--grace", "1h"}, args...)...)
	env.WaitForPod(t, ns, "gated-a", 30*time.Second, "drained", func(p *corev1.Pod) bool {
		st, _ := inplace.ReadState(p)
		return st != nil && st.Stage == inplace.StageDraining && !cluster.PodReady(p)
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()

	if r := runCLI(t, append([]string{"run", "--image", "app=" + appV1, "--supersede"}, args...)...); r.Code != 0 {
		t.Fatalf("superseding with the running image: %s", r)
	}
	for _, name := range []string{"gated-a", "gated-b"} {
		p := env.WaitForPod(t, ns, name, 10*time.Second, "Ready", cluster.PodReady)
		if st := stateOf(t, p); st != nil && !st.Stage.Terminal() {
			t.Errorf("pod %s left in stage %s", name, st.Stage)
		}
		if p.Spec.Containers[0].Image != appV1 {
			t.Errorf("pod %s on %s, want %s", name, p.Spec.Containers[0].Image, appV1)
		}
	}
}

// TestRollbackTakesBackPodsRecreatedFromTheNewTemplate deletes a pod of an OnDelete
// StatefulSet while the rollout holds it: the controller recreates it from the new template.
// When the rollout then fails, that pod must go back to the old image and revision too, or the
// restored OnDelete strategy would leave it on the new image for good.
func TestRollbackTakesBackPodsRecreatedFromTheNewTemplate(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	orig, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := identities(t, ns, "app=web")
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,100%", "--soak", "30s")

	env.WaitForPod(t, ns, "web-2", 60*time.Second, "Updated", func(p *corev1.Pod) bool {
		st, _ := inplace.ReadState(p)
		return st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "web-0", 30*time.Second, "recreated on "+appV2, func(p *corev1.Pod) bool {
		return string(p.UID) != before["web-0"].uid && p.Spec.Containers[0].Image == appV2 && cluster.PodReady(p)
	})
	recreated := identities(t, ns, "app=web")["web-0"]
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "web-2", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+kubeletsim.CrashImagesAnnotation+`":"`+appV2+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("run exited %d, want 1:\n%s", code, clitest.LastLines(stderr.String(), 20))
	}

	sts := waitStatefulSet(t, ns, "web", "restored", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Spec.Template.Spec.Containers[0].Image == appV1
	})
	if !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("strategy %+v, want the original %+v", sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
	}
	after := identities(t, ns, "app=web")
	v1Digest := before["web-1"].imageIDs["app"]
	if a := after["web-0"]; a.uid != recreated.uid || a.imageIDs["app"] != v1Digest {
		t.Errorf("web-0, recreated on %s during the rollout: %+v; want the same pod back on %s", appV2, a, v1Digest)
	}
	for _, p := range listPods(t, ns, "app=web") {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != orig.Status.UpdateRevision {
			t.Errorf("pod %s at revision %s, want the original %s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], orig.Status.UpdateRevision)
		}
	}
	// The controller, back on OnDelete, leaves every pod where it is.
	time.Sleep(2 * time.Second)
	for name, a := range identities(t, ns, "app=web") {
		if b := after[name]; a.uid != b.uid || a.imageIDs["app"] != v1Digest {
			t.Errorf("pod %s changed after the rollback: %+v", name, a)
		}
	}
}

// TestPodAlreadyOnTheTargetSpelledOtherwiseCounts has one pod already on the target image,
// spelled as Docker Hub's full name: it counts as updated and the rollout goes on.
func TestPodAlreadyOnTheTargetSpelledOtherwiseCounts(t *testing.T) {
	ns := env.Namespace(t)
	for name, image := range map[string]string{"a-old": "nginx:1.25", "b-new": "docker.io/library/nginx:1.26", "c-old": "nginx:1.25"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "spelled"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}}}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
	}
	r := runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", "app=spelled", "--image", "web=nginx:1.26", "--batches", "1,100%", "--timeout", "10s",
		"--pin-digests", "never") // by spelling: Docker Hub does not answer here, and pinning would refuse the pod on the tag
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	for _, p := range listPods(t, ns, "app=spelled") {
		st := stateOf(t, &p)
		switch {
		case p.Name == "b-new" && st != nil:
			t.Errorf("b-new, already on the target, was touched: %+v", st)
		case p.Name != "b-new" && (st == nil || inplace.Judged(&p, st, time.Now()) != inplace.StageUpdated):
			t.Errorf("pod %s: state %+v, want Updated", p.Name, st)
		}
	}
}
