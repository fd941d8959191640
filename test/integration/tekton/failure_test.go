package tekton_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const crashImage = "registry.example/app:crash"

// progress decodes a run status' extraFields.
func progress(t *testing.T, s *v1beta1.CustomRunStatus) map[string]any {
	t.Helper()
	out := map[string]any{}
	if len(s.ExtraFields.Raw) == 0 {
		return out
	}
	if err := json.Unmarshal(s.ExtraFields.Raw, &out); err != nil {
		t.Fatalf("decoding extraFields %s: %v", s.ExtraFields.Raw, err)
	}
	return out
}

// checkBackOnV1 fails unless every pod of web is the pod it was (same UID), Ready and running
// exactly the image it ran before (its digest: a revert pins it), and the StatefulSet's template
// is on v1 with its rollout rolled back.
func checkBackOnV1(t *testing.T, ns string, before map[string]podRecord) {
	t.Helper()
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		b, ok := before[p.Name]
		cs := cluster.ContainerStatus(&p, "app")
		switch {
		case !ok || string(p.UID) != b.uid:
			t.Errorf("pod %s (uid %s) is not the pod it was before the rollout: want it reverted in place", p.Name, p.UID)
		case cs == nil || cs.ImageID != b.imageID || !cluster.PodReady(&p):
			t.Errorf("pod %s: spec image %s, status %+v, Ready %v; want it Ready on %s again", p.Name, p.Spec.Containers[0].Image, cs, cluster.PodReady(&p), b.imageID)
		}
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != clitest.AppV1 {
		t.Errorf("StatefulSet %s/web template on %s, want %s back", ns, img, clitest.AppV1)
	}
	if lock := sts.Annotations[workload.LockAnnotation]; !strings.Contains(lock, `"phase":"RolledBack"`) {
		t.Errorf("StatefulSet %s/web lock %s, want its rollout RolledBack", ns, lock)
	}
}

// TestCrashFailsAfterRetriesAndFinallySeesFailed: a crash-looping image fails the CustomRun; with
// retries: 1 the second attempt is a new rollout started from the rolled-back workload, and
// retriesStatus keeps the first; the pods end on the old image, the PipelineRun fails, and its
// finally task is given $(tasks.rollout.status) = Failed.
func TestCrashFailsAfterRetriesAndFinallySeesFailed(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 6)
	before := recordPods(t, ns, "web")
	create(t, dynamicClient(t), pipelineRunsGVR, ns, `
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: crash
spec:
  pipelineSpec:
    tasks:`+rolloutTask("rollout", crashImage, "        retries: 1")+`
    finally:
      - name: report
        taskSpec:
          apiVersion: `+otherAPIVersion+`
          kind: `+otherKind+`
        params:
          - name: status
            value: $(tasks.rollout.status)
`)
	// The finally task's kind has no controller here: the test plays it, once it saw its params.
	report := waitCustomRun(t, ns, "crash", "report", rolloutTimeout, "created", func(*v1beta1.CustomRun) bool { return true })
	if p := report.Spec.GetParam("status"); p == nil || p.Value.StringVal != "Failed" {
		t.Errorf("finally CustomRun %s: param status = %+v, want $(tasks.rollout.status) = Failed", report.Name, p)
	}
	report.Status.InitializeConditions()
	report.Status.MarkCustomRunSucceeded("Reported", "reported")
	if _, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).UpdateStatus(context.Background(), report, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("completing the finally CustomRun %s: %v", report.Name, err)
	}
	if cond := waitPipelineRun(t, ns, "crash", rolloutTimeout); cond.Status != corev1.ConditionFalse {
		t.Errorf("PipelineRun %s/crash: Succeeded %s %s, want False", ns, cond.Status, cond.Reason)
	}

	run := waitCustomRun(t, ns, "crash", "rollout", time.Second, "done", isDone)
	if c := succeeded(run); c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("CustomRun %s: Succeeded %s %s: %s, want False PodFailed", run.Name, c.Status, c.Reason, c.Message)
	}
	if len(run.Status.RetriesStatus) != 1 {
		t.Fatalf("CustomRun %s: %d retriesStatus, want the first attempt's", run.Name, len(run.Status.RetriesStatus))
	}
	first := run.Status.RetriesStatus[0]
	if c := first.GetCondition(apis.ConditionSucceeded); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("CustomRun %s: retriesStatus[0] Succeeded %+v, want False PodFailed", run.Name, c)
	}
	firstID, lastID := progress(t, &first)["rolloutID"], progress(t, &run.Status)["rolloutID"]
	if firstID == nil || lastID == nil || firstID == lastID {
		t.Errorf("CustomRun %s: rollout %v in the first attempt, %v in the second: want two rollouts", run.Name, firstID, lastID)
	}
	if got := result(run, "phase"); got != "RolledBack" {
		t.Errorf("CustomRun %s: result phase %q, want RolledBack", run.Name, got)
	}
	checkBackOnV1(t, ns, before)
}

// TestMisspeltSpecFailsNamingTheField: a wrong spec or param fails the run at once, naming the
// field, and changes nothing on the cluster.
func TestMisspeltSpecFailsNamingTheField(t *testing.T) {
	tests := []struct {
		name string
		spec string
		// params is the YAML list of the run's params.
		params string
		want   []string
	}{
		{"misspelt spec field", `{target: {kind: StatefulSet, name: web}, batchs: [1, "100%"]}`,
			`[{name: images, value: ["app=` + clitest.AppV2 + `"]}]`, []string{"InvalidSpec", "batchs"}},
		{"unknown param", `{target: {kind: StatefulSet, name: web}}`,
			`[{name: images, value: ["app=` + clitest.AppV2 + `"]}, {name: image, value: x}]`, []string{"InvalidSpec", `"image"`}},
		{"bad image pair", `{target: {kind: StatefulSet, name: web}}`,
			`[{name: images, value: ["app:v2"]}]`, []string{"InvalidSpec", "params[images]", "CONTAINER=IMAGE"}},
		{"no such container", `{target: {kind: StatefulSet, name: web}}`,
			`[{name: images, value: ["db=` + clitest.AppV2 + `"]}]`, []string{"Refused", `no container named "db"`}},
	}
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 2)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "bad-" + string(rune('a'+i))
			createRun(t, ns, name, tt.spec, tt.params)
			run := waitRun(t, ns, name, "done", isDone)
			c := succeeded(run)
			text := c.Reason + " " + c.Message
			for _, w := range tt.want {
				if c.Status != corev1.ConditionFalse || !strings.Contains(text, w) {
					t.Errorf("CustomRun %s: Succeeded %s %s: %s; want False, naming %s", name, c.Status, c.Reason, c.Message, w)
				}
			}
		})
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lock, ok := sts.Annotations[workload.LockAnnotation]; ok {
		t.Errorf("StatefulSet %s/web has a rollout lock %s: bad input must change nothing", ns, lock)
	}
	if imgs := podImages(t, ns, "web"); imgs[clitest.AppV1] != 2 {
		t.Errorf("pods by image: %v, want both still on %s", imgs, clitest.AppV1)
	}
}
