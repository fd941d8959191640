package tekton_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	tektonclient "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// rolloutTimeout bounds a rollout of a few pods with short soaks, on a loaded machine.
const rolloutTimeout = 3 * time.Minute

func tektonClient(t testing.TB) tektonclient.Interface {
	t.Helper()
	c, err := tektonclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building a Tekton client: %v", err)
	}
	return c
}

// podRecord is what a pod must keep through an in-place rollout.
type podRecord struct {
	uid      string
	restarts int32
	// imageID is the app container's image by digest, what a revert must put back exactly.
	imageID string
}

// recordPods maps the pods of app to their UID, container restarts and app image digest.
func recordPods(t *testing.T, ns, app string) map[string]podRecord {
	t.Helper()
	out := map[string]podRecord{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+app) {
		var restarts int32
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		rec := podRecord{uid: string(p.UID), restarts: restarts}
		if cs := cluster.ContainerStatus(&p, "app"); cs != nil {
			rec.imageID = cs.ImageID
		}
		out[p.Name] = rec
	}
	return out
}

// podImages counts the pods of app by the image of their app container, spec and status alike.
func podImages(t *testing.T, ns, app string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+app) {
		img := p.Spec.Containers[0].Image
		if cs := cluster.ContainerStatus(&p, "app"); cs == nil || cs.Image != img || !cluster.PodReady(&p) {
			img += " (not running it yet)"
		}
		out[img]++
	}
	return out
}

// waitCustomRun polls the CustomRun of pipeline task task in PipelineRun pr until done holds.
func waitCustomRun(t *testing.T, ns, pr, task string, timeout time.Duration, what string, done func(*v1beta1.CustomRun) bool) *v1beta1.CustomRun {
	t.Helper()
	tc := tektonClient(t)
	var got *v1beta1.CustomRun
	cluster.WaitFor(t, timeout, fmt.Sprintf("the CustomRun of task %s of PipelineRun %s/%s: %s", task, ns, pr, what), func(ctx context.Context) (bool, error) {
		list, err := tc.TektonV1beta1().CustomRuns(ns).List(ctx, metav1.ListOptions{LabelSelector: "tekton.dev/pipelineRun=" + pr + ",tekton.dev/pipelineTask=" + task})
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		got = &list.Items[0]
		return done(got), nil
	})
	return got
}

// waitPipelineRun polls PipelineRun ns/name until its Succeeded condition is no longer Unknown.
func waitPipelineRun(t *testing.T, ns, name string, timeout time.Duration) *apis.Condition {
	t.Helper()
	tc := tektonClient(t)
	var cond *apis.Condition
	cluster.WaitFor(t, timeout, "PipelineRun "+ns+"/"+name+" done", func(ctx context.Context) (bool, error) {
		pr, err := tc.TektonV1().PipelineRuns(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond = pr.Status.GetCondition(apis.ConditionSucceeded)
		return cond != nil && cond.Status != corev1.ConditionUnknown, nil
	})
	return cond
}

func succeeded(run *v1beta1.CustomRun) *apis.Condition {
	return run.Status.GetCondition(apis.ConditionSucceeded)
}

func isDone(run *v1beta1.CustomRun) bool { return run.IsDone() }

func result(run *v1beta1.CustomRun, name string) string {
	for _, r := range run.Status.Results {
		if r.Name == name {
			return r.Value
		}
	}
	return ""
}

// rolloutTask is a pipeline task of our kind embedding a rollout of StatefulSet web to image in
// three batches, with params added as given (YAML lines indented for the task).
func rolloutTask(name, image string, extra string) string {
	return fmt.Sprintf(`
      - name: %s
        taskSpec:
          apiVersion: inplace-rollout.io/v1alpha1
          kind: InPlaceRollout
          spec:
            target: {kind: StatefulSet, name: web}
            batches: [1, "50%%", "100%%"]
            gracePeriod: 1s
            soak: 1s
            timeout: 2m
        params:
          - name: images
            value: ["app=%s"]
%s`, name, image, extra)
}

// TestPipelineRunRollsStatefulSetInPlace: a PipelineRun whose custom task rolls a 6-pod
// StatefulSet succeeds, every pod on the new image with its UID and no container restarted more
// than once; the run's results reach the next task's params and the PipelineRun's results; no
// Pod and no TaskRun is created for the custom tasks.
func TestPipelineRunRollsStatefulSetInPlace(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 6)
	before := recordPods(t, ns, "web")
	// The next task rolls the same StatefulSet to the same image, with max-unavailable the count
	// the first one reports: it finds nothing to do, and its params show what it was given.
	create(t, dynamicClient(t), pipelineRunsGVR, ns, `
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: roll
spec:
  pipelineSpec:
    results:
      - name: phase
        value: $(tasks.rollout.results.phase)
      - name: updated
        value: $(tasks.rollout.results.updated-pods)
    tasks:`+rolloutTask("rollout", clitest.AppV2, "")+`
      - name: again
        runAfter: [rollout]
        taskSpec:
          apiVersion: inplace-rollout.io/v1alpha1
          kind: InPlaceRollout
          spec:
            target: {kind: StatefulSet, name: web}
            # registry.example does not answer: pinning would refuse the pods already on the tag.
            pinDigests: never
        params:
          - name: images
            value: ["app=`+clitest.AppV2+`"]
          - name: max-unavailable
            value: $(tasks.rollout.results.updated-pods)
`)
	cond := waitPipelineRun(t, ns, "roll", rolloutTimeout)
	run := waitCustomRun(t, ns, "roll", "rollout", time.Second, "done", isDone)
	again := waitCustomRun(t, ns, "roll", "again", time.Second, "done", isDone)
	if cond.Status != corev1.ConditionTrue {
		t.Fatalf("PipelineRun %s/roll: %s %s: %s; its CustomRuns: rollout %+v, again %+v", ns, cond.Status, cond.Reason, cond.Message, succeeded(run), succeeded(again))
	}
	if c := succeeded(run); c.Status != corev1.ConditionTrue {
		t.Errorf("CustomRun %s: Succeeded %s %s: %s", run.Name, c.Status, c.Reason, c.Message)
	}
	for name, want := range map[string]string{"phase": "Succeeded", "updated-pods": "6", "rolled-back": "0"} {
		if got := result(run, name); got != want {
			t.Errorf("CustomRun %s: result %s = %q, want %q", run.Name, name, got, want)
		}
	}
	if msg := result(run, "message"); !strings.Contains(msg, "6 of 6 pods updated") {
		t.Errorf("CustomRun %s: result message = %q, want it to say 6 of 6 pods updated", run.Name, msg)
	}
	if p := again.Spec.GetParam("max-unavailable"); p == nil || p.Value.StringVal != "6" {
		t.Errorf("CustomRun %s: param max-unavailable = %+v, want the first task's updated-pods, 6", again.Name, p)
	}
	pr, err := tektonClient(t).TektonV1().PipelineRuns(ns).Get(context.Background(), "roll", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range pr.Status.Results {
		got[r.Name] = r.Value.StringVal
	}
	if got["phase"] != "Succeeded" || got["updated"] != "6" {
		t.Errorf("PipelineRun %s/roll: results %v, want phase Succeeded, updated 6", ns, got)
	}

	if imgs := podImages(t, ns, "web"); imgs[clitest.AppV2] != 6 {
		t.Errorf("pods by image: %v, want all 6 on %s", imgs, clitest.AppV2)
	}
	after := recordPods(t, ns, "web")
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("pod %s is gone", name)
		case a.uid != b.uid:
			t.Errorf("pod %s was recreated (uid %s, was %s): want it updated in place", name, a.uid, b.uid)
		case a.restarts > b.restarts+1:
			t.Errorf("pod %s: %d container restarts, was %d: want at most one for its update", name, a.restarts, b.restarts)
		}
	}
	// The controller's /metrics counts the run's pods, labelled with its namespace and workload,
	// and its log names them on every line of the rollout.
	if want := fmt.Sprintf(`inplace_rollout_pods_updated_total{namespace=%q,workload="StatefulSet/web"} 6`, ns); !strings.Contains(cluster.Scrape(t, controller.HealthURL+"/metrics"), want) {
		t.Errorf("the controller's /metrics has no %s", want)
	}
	if lines := clitest.LogLines(t, controller.LogPath, `msg="rollout started"`, "namespace="+ns+" "); len(lines) != 1 || !strings.Contains(lines[0], " workload=StatefulSet/web ") || !strings.Contains(lines[0], " rolloutID=") {
		t.Errorf("the controller's log: lines %q, want one rollout started naming workload=StatefulSet/web and its rolloutID", lines)
	}
	if pods := clitest.ListPods(t, env, ns, "app!=web"); len(pods) != 0 {
		t.Errorf("namespace %s has %d pods besides the StatefulSet's, want none for custom tasks", ns, len(pods))
	}
	taskRuns, err := tektonClient(t).TektonV1().TaskRuns(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(taskRuns.Items) != 0 {
		t.Errorf("namespace %s has %d TaskRuns, want none for custom tasks", ns, len(taskRuns.Items))
	}
}

// createRun creates CustomRun ns/name of our kind, embedding spec (flow-style YAML) with params
// (a flow-style YAML list), as a person would without a Pipeline.
func createRun(t testing.TB, ns, name, spec, params string) {
	t.Helper()
	create(t, dynamicClient(t), customRunsGVR, ns, `
apiVersion: tekton.dev/v1beta1
kind: CustomRun
metadata:
  name: `+name+`
spec:
  customSpec:
    apiVersion: inplace-rollout.io/v1alpha1
    kind: InPlaceRollout
    spec: `+spec+`
  params: `+params+`
`)
}

// waitRun polls CustomRun ns/name until done holds.
func waitRun(t testing.TB, ns, name, what string, done func(*v1beta1.CustomRun) bool) *v1beta1.CustomRun {
	t.Helper()
	var run *v1beta1.CustomRun
	cluster.WaitFor(t, rolloutTimeout, "CustomRun "+ns+"/"+name+": "+what, func(ctx context.Context) (bool, error) {
		r, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Get(ctx, name, metav1.GetOptions{})
		run = r
		return err == nil && done(r), err
	})
	return run
}
