package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestTemplateChangedMidRolloutStopsForADecision has someone else set the StatefulSet's image
// (kubectl set image) while the rollout soaks its first batch. The rollout must stop with the
// typed reason TemplateChanged, exit 3, roll nothing back and keep the other person's template;
// `status` shows the reason. Then each of the three ways on is taken, on its own StatefulSet:
// rollback keeping their template, rollback --restore-template, and putting the rollout's images
// back and running again.
func TestTemplateChangedMidRolloutStopsForADecision(t *testing.T) {
	ns := env.Namespace(t)
	const foreign = appV3 // the other person's image
	for _, name := range []string{"keep", "restore", "resume"} {
		createStatefulSet(t, ns, name, 2)
	}
	stopped := func(t *testing.T, name string) map[string]identity {
		t.Helper()
		before := identities(t, ns, "app="+name)
		var stdout, stderr bytes.Buffer
		cmd := startWithOutput(t, &stdout, &stderr, "run", "-n", ns, "--target", "statefulset/"+name, "--image", "app="+appV2,
			"--batches", "1,100%", "--soak", "20s", "--timeout", "10s", "-o", "json")
		env.WaitForPod(t, ns, name+"-1", 60*time.Second, "Updated", func(p *corev1.Pod) bool {
			st, _ := inplace.ReadState(p)
			return st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
		})
		setImage(t, ns, name, foreign)
		code := waitExit(t, cmd, 60*time.Second)
		out := stdout.String() + stderr.String()
		if code != 3 || !contains(out, `"reason": "TemplateChanged"`) || !contains(out, foreign) || !contains(out, appV2) {
			t.Fatalf("run exited %d, want 3 with reason TemplateChanged naming %s and %s:\n%s\n%s", code, foreign, appV2, stdout.String(), clitest.LastLines(stderr.String(), 10))
		}
		// Nothing was rolled back, and the other person's template stays.
		sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != foreign {
			t.Errorf("%s: template image %s, want %s kept", name, img, foreign)
		}
		p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name+"-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := stateOf(t, p); st == nil || inplace.Judged(p, st, time.Now()) != inplace.StageUpdated || p.Spec.Containers[0].Image != appV2 {
			t.Errorf("%s-1: state %+v on %s, want left Updated on %s", name, st, p.Spec.Containers[0].Image, appV2)
		}
		return before
	}

	t.Run("status and rollback keeping their template", func(t *testing.T) {
		stopped(t, "keep")
		r := runCLI(t, "status", "-n", ns, "--target", "statefulset/keep", "-o", "json")
		var report struct {
			Rollout struct {
				Phase      string `json:"phase"`
				ReasonCode string `json:"reasonCode"`
				Reason     string `json:"reason"`
			} `json:"rollout"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &report); err != nil || report.Rollout.ReasonCode != "TemplateChanged" || !contains(report.Rollout.Reason, foreign) {
			t.Errorf("status -o json: %+v (%v), want reasonCode TemplateChanged and a reason naming %s:\n%s", report.Rollout, err, foreign, r)
		}
		if r := runCLI(t, "status", "-n", ns, "--target", "statefulset/keep"); r.Code != 0 || !contains(r.Stdout, "TemplateChanged") {
			t.Errorf("status: %s\nwant the reason TemplateChanged", r)
		}
		r = runCLI(t, "rollback", "-n", ns, "--target", "statefulset/keep")
		if r.Code != 0 || !contains(r.Stdout, "template keeps") || !contains(r.Stdout, foreign) {
			t.Fatalf("rollback: %s\nwant exit 0 and a message that the template keeps %s", r, foreign)
		}
		sts := waitStatefulSet(t, ns, "keep", "handed back", func(s *appsv1.StatefulSet) bool {
			return s.Status.ObservedGeneration == s.Generation
		})
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != foreign {
			t.Errorf("rollback overwrote the template: %s, want %s", img, foreign)
		}
		if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
			t.Errorf("strategy %+v, want RollingUpdate restored", sts.Spec.UpdateStrategy)
		}
	})

	t.Run("rollback restoring the template", func(t *testing.T) {
		before := stopped(t, "restore")
		r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/restore", "--restore-template")
		if r.Code != 0 {
			t.Fatalf("rollback --restore-template: %s", r)
		}
		sts := waitStatefulSet(t, ns, "restore", "restored", func(s *appsv1.StatefulSet) bool {
			return s.Status.ObservedGeneration == s.Generation && s.Status.CurrentRevision == s.Status.UpdateRevision
		})
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != appV1 {
			t.Errorf("template image %s, want %s restored", img, appV1)
		}
		for name, a := range identities(t, ns, "app=restore") {
			if b := before[name]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
				t.Errorf("pod %s: UID %s->%s imageID %s->%s, want the same pod back on its digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
			}
		}
	})

	t.Run("images put back and run again", func(t *testing.T) {
		before := stopped(t, "resume")
		setImage(t, ns, "resume", appV2)
		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/resume", "--image", "app="+appV2, "--batches", "1,100%", "--soak", "1s", "--timeout", "10s")
		if r.Code != 0 {
			t.Fatalf("run again: %s", r)
		}
		checkInPlace(t, before, identities(t, ns, "app=resume"), 1)
		podsOnImage(t, ns, "app=resume", appV2)
	})
}

// setImage changes the StatefulSet's app image as `kubectl set image` does.
func setImage(t *testing.T, ns, name, image string) {
	t.Helper()
	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"` + image + `"}]}}}}`
	if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits for the command to end and returns its exit code; it fails the test if the
// command still runs after limit.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after %s", cmd.Args[1:], limit)
		return -1
	}
}

// startWithOutput starts the command in the background with its stdout and stderr captured;
// the test's end kills it if still running.
func startWithOutput(t *testing.T, stdout, stderr *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(cli, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// TestDeploymentTemplateChangedMidRolloutIsKept changes a paused Deployment's template while
// the rollout soaks its first batch: finalizing would overwrite it with the rollout's images.
// The rollout stops instead (exit 3, TemplateChanged), and rollback leaves the other person's
// template, which the unpaused Deployment then rolls out its own way.
func TestDeploymentTemplateChangedMidRolloutIsKept(t *testing.T) {
	ns := env.Namespace(t)
	createDeployment(t, ns, "api", 2)
	var stdout, stderr bytes.Buffer
	cmd := startWithOutput(t, &stdout, &stderr, "run", "-n", ns, "--target", "deployment/api", "--image", "app="+appV2,
		"--batches", "1,100%", "--soak", "5s", "--timeout", "10s", "-o", "json")
	cluster.WaitFor(t, 60*time.Second, "a pod Updated", func(context.Context) (bool, error) {
		for _, p := range listPods(t, ns, "app=api") {
			if st := stateOf(t, &p); st != nil && inplace.Judged(&p, st, time.Now()) == inplace.StageUpdated {
				return true, nil
			}
		}
		return false, nil
	})
	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"` + appV3 + `"}]}}}}`
	if _, err := env.Client.AppsV1().Deployments(ns).Patch(context.Background(), "api", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 60*time.Second); code != 3 || !contains(stdout.String(), `"reason": "TemplateChanged"`) || !contains(stdout.String(), appV3) {
		t.Fatalf("run exited %d, want 3 with reason TemplateChanged naming %s:\n%s\n%s", code, appV3, stdout.String(), clitest.LastLines(stderr.String(), 10))
	}
	if r := runCLI(t, "rollback", "-n", ns, "--target", "deployment/api"); r.Code != 0 || !contains(r.Stdout, "template keeps") {
		t.Fatalf("rollback: %s\nwant exit 0 and the template kept", r)
	}
	got := waitDeployment(t, ns, "api", 2)
	if got.Spec.Paused || got.Spec.Template.Spec.Containers[0].Image != appV3 {
		t.Fatalf("deployment paused=%v template %s, want unpaused on %s", got.Spec.Paused, got.Spec.Template.Spec.Containers[0].Image, appV3)
	}
	cluster.WaitFor(t, 60*time.Second, "the Deployment's own rollout of "+appV3, func(context.Context) (bool, error) {
		pods := listPods(t, ns, "app=api")
		n := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == appV3 && cluster.PodReady(&p) {
				n++
			}
		}
		return n == 2, nil
	})
}
