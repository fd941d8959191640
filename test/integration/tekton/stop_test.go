package tekton_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// slowImage takes ten seconds to become Ready in the simulated kubelet: a rollout of it is
// still in its first batch when the test stops it.
const slowImage = "registry.example/app:slow-v2"

// updating reports whether the run's rollout has begun changing pods.
func updating(t *testing.T) func(*v1beta1.CustomRun) bool {
	return func(run *v1beta1.CustomRun) bool {
		p := progress(t, &run.Status)
		return p["rolloutID"] != nil && p["phase"] == "Progressing"
	}
}

// startPipelineRun creates a StatefulSet web of pods on v1 in a new namespace and PipelineRun
// name rolling it to image with one rollout task (extra YAML lines for the task; spec lines for
// the PipelineRun beside its pipelineSpec). It returns the namespace and web's pods as they were.
func startPipelineRun(t *testing.T, name string, pods int32, image, spec, task string) (string, map[string]podRecord) {
	t.Helper()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", pods)
	before := recordPods(t, ns, "web")
	create(t, dynamicClient(t), pipelineRunsGVR, ns, `
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: `+name+`
spec:
`+spec+`  pipelineSpec:
    tasks:`+rolloutTask("rollout", image, task))
	return ns, before
}

// TestStoppedRunRollsBack: a run stopped mid-rollout, by cancelling its PipelineRun, by the
// PipelineRun's timeouts, or by its own timeout, rolls the workload back before it fails with
// the reason Tekton expects, and its message says which of these stopped it. Tekton enforces a
// PipelineRun's timeouts by cancelling the run, and counts it as timed out only when it fails
// with reason CustomRunCancelled; only the run's own timeout gives CustomRunTimedOut.
func TestStoppedRunRollsBack(t *testing.T) {
	tests := []struct {
		name string
		// pipelineRun is the PipelineRun's spec lines beside its pipelineSpec.
		pipelineRun string
		// task is extra YAML of the rollout task.
		task string
		// stop, when set, stops the PipelineRun once the rollout is updating pods.
		stop       func(t *testing.T, ns string)
		wantReason string
		// wantStatusMessage is the spec.statusMessage Tekton cancels the run with, if it does.
		wantStatusMessage v1beta1.CustomRunSpecStatusMessage
		// says are what the condition's message must say, and not what it must not (a cancel
		// must not read as a timeout, nor a timeout as a cancel), in the namespace ns.
		says, not    func(ns string) []string
		wantPRReason string
	}{
		{
			name: "PipelineRun cancelled",
			stop: func(t *testing.T, ns string) {
				patch := []byte(`{"spec":{"status":"Cancelled"}}`)
				if _, err := tektonClient(t).TektonV1().PipelineRuns(ns).Patch(context.Background(), "stop", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					t.Fatalf("cancelling PipelineRun %s/stop: %v", ns, err)
				}
			},
			wantReason: "CustomRunCancelled", wantStatusMessage: v1beta1.CustomRunCancelledByPipelineMsg,
			says:         func(ns string) []string { return []string{"because its PipelineRun " + ns + "/stop was cancelled"} },
			not:          func(string) []string { return []string{"timed out", "timeout"} },
			wantPRReason: "Cancelled",
		},
		{
			name:        "PipelineRun timed out",
			pipelineRun: "  timeouts: {pipeline: 5s}\n",
			wantReason:  "CustomRunCancelled", wantStatusMessage: v1beta1.CustomRunCancelledByPipelineTimeoutMsg,
			says: func(ns string) []string {
				return []string{"because its PipelineRun " + ns + "/stop timed out", "raise the PipelineRun's timeouts"}
			},
			not:          func(ns string) []string { return []string{ns + "/stop was cancelled"} },
			wantPRReason: "PipelineRunTimeout",
		},
		{
			// timeouts.tasks expires while the rollout's first pod is on its way (slowImage
			// takes 10 s): Tekton times out the tasks, not the whole PipelineRun.
			name:        "PipelineRun's tasks timed out",
			pipelineRun: "  timeouts: {tasks: 6s}\n",
			wantReason:  "CustomRunCancelled", wantStatusMessage: v1beta1.CustomRunCancelledByPipelineTimeoutMsg,
			says: func(ns string) []string {
				return []string{"because its PipelineRun " + ns + "/stop timed out", "raise the PipelineRun's timeouts"}
			},
			not:          func(ns string) []string { return []string{ns + "/stop was cancelled"} },
			wantPRReason: "PipelineRunTimeout",
		},
		{
			name:       "run timed out",
			task:       "        timeout: 5s\n",
			wantReason: "CustomRunTimedOut",
			says: func(string) []string {
				return []string{"timed out after 5s, its own timeout", "raise the pipeline task's timeout"}
			},
			not:          func(string) []string { return []string{"cancelled", "PipelineRun"} },
			wantPRReason: "Failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns, before := startPipelineRun(t, "stop", 3, slowImage, tt.pipelineRun, tt.task)
			waitCustomRun(t, ns, "stop", "rollout", rolloutTimeout, "updating pods", updating(t))
			if tt.stop != nil {
				tt.stop(t, ns)
			}
			run := waitCustomRun(t, ns, "stop", "rollout", rolloutTimeout, "done", isDone)
			c := succeeded(run)
			if c.Status != corev1.ConditionFalse || c.Reason != tt.wantReason {
				t.Errorf("CustomRun %s: Succeeded %s %s: %s; want False %s", run.Name, c.Status, c.Reason, c.Message, tt.wantReason)
			}
			if run.Spec.StatusMessage != tt.wantStatusMessage {
				t.Errorf("CustomRun %s: spec.statusMessage %q, want %q", run.Name, run.Spec.StatusMessage, tt.wantStatusMessage)
			}
			for _, w := range tt.says(ns) {
				if !strings.Contains(c.Message, w) {
					t.Errorf("CustomRun %s: message %q does not say %q", run.Name, c.Message, w)
				}
			}
			for _, w := range tt.not(ns) {
				if strings.Contains(c.Message, w) {
					t.Errorf("CustomRun %s: message %q says %q", run.Name, c.Message, w)
				}
			}
			if !strings.Contains(c.Message, "StatefulSet "+ns+"/web was rolled back") {
				t.Errorf("CustomRun %s: message %q, want it to say StatefulSet %s/web was rolled back", run.Name, c.Message, ns)
			}
			if got := result(run, "phase"); got != "RolledBack" {
				raw, _ := json.Marshal(run.Status)
				t.Errorf("CustomRun %s: result phase %q, want RolledBack; status %s", run.Name, got, raw)
			}
			checkBackOnV1(t, ns, before)
			if cond := waitPipelineRun(t, ns, "stop", rolloutTimeout); cond.Status != corev1.ConditionFalse || cond.Reason != tt.wantPRReason {
				t.Errorf("PipelineRun %s/stop: Succeeded %s %s: %s; want False %s", ns, cond.Status, cond.Reason, cond.Message, tt.wantPRReason)
			}
		})
	}
}

// TestControllerKilledMidRollout: our controller killed (SIGKILL) in the middle of a rollout and
// started again finishes it; no pod is recreated and no container restarts more than once.
func TestControllerKilledMidRollout(t *testing.T) {
	ns, before := startPipelineRun(t, "kill", 3, slowImage, "", "")
	waitCustomRun(t, ns, "kill", "rollout", rolloutTimeout, "updating pods", updating(t))
	if err := controller.Kill(); err != nil {
		t.Fatal(err)
	}
	// The rollout stands still while no controller runs: the next pods do not start.
	time.Sleep(2 * time.Second)
	if err := controller.Restart(); err != nil {
		t.Fatalf("starting the controller again: %v", err)
	}
	if cond := waitPipelineRun(t, ns, "kill", rolloutTimeout); cond.Status != corev1.ConditionTrue {
		t.Fatalf("PipelineRun %s/kill: Succeeded %s %s: %s; want True", ns, cond.Status, cond.Reason, cond.Message)
	}
	if imgs := podImages(t, ns, "web"); imgs[slowImage] != 3 {
		t.Errorf("pods by image: %v, want all 3 on %s", imgs, slowImage)
	}
	for name, a := range recordPods(t, ns, "web") {
		b := before[name]
		if a.uid != b.uid || a.restarts > b.restarts+1 {
			t.Errorf("pod %s: uid %s, %d restarts; was uid %s, %d restarts: want the same pod, restarted at most once", name, a.uid, a.restarts, b.uid, b.restarts)
		}
	}
}

// TestDeletedRunRollsBack: a PipelineRun deleted mid-rollout takes its CustomRun with it, and
// the run's finalizer holds it until the workload is rolled back.
func TestDeletedRunRollsBack(t *testing.T) {
	ns, before := startPipelineRun(t, "gone", 3, slowImage, "", "")
	run := waitCustomRun(t, ns, "gone", "rollout", rolloutTimeout, "updating pods", updating(t))
	if !slices.Contains(run.Finalizers, "inplace-rollout.io/rollback") {
		t.Errorf("CustomRun %s in flight: finalizers %v, want inplace-rollout.io/rollback", run.Name, run.Finalizers)
	}
	if err := tektonClient(t).TektonV1().PipelineRuns(ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting PipelineRun %s/gone: %v", ns, err)
	}
	cluster.WaitFor(t, rolloutTimeout, "CustomRun "+ns+"/"+run.Name+" gone once rolled back", func(ctx context.Context) (bool, error) {
		_, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Get(ctx, run.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	checkBackOnV1(t, ns, before)
}
