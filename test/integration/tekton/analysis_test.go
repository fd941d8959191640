package tekton_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// analysisParam is the analysis config of the tests' Prometheus, its password read from
// Secret prom (key password) of the run's namespace; the address comes in the prometheus-url
// param.
const analysisParam = `prometheus:
  basicAuth: {username: ` + promUser + `, passwordSecret: {name: prom, key: password}}
interval: 1s
count: 2
window: 5s
`

// newAnalysedWeb creates a 4-pod StatefulSet and the Secret of the Prometheus password, and waits
// until Prometheus has seen the pods serve for a full rate window.
func newAnalysedWeb(t *testing.T) string {
	t.Helper()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 4)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom", Namespace: ns}, StringData: map[string]string{"password": promPassword}}
	if _, err := env.Client.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	return ns
}

// analysedRun creates CustomRun name rolling web to image, gated on the analysis.
func analysedRun(t *testing.T, ns, name, image string) {
	t.Helper()
	params, err := json.Marshal([]map[string]any{
		{"name": "images", "value": []string{"app=" + image}},
		{"name": "batches", "value": "1,100%"},
		{"name": "analysis", "value": analysisParam},
		{"name": "prometheus-url", "value": env.PrometheusURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	createRun(t, ns, name, "{target: {kind: StatefulSet, name: web}}", string(params))
}

// TestAnalysisGatesEveryBatch: with the password in a Secret, a good image passes every batch's
// analysis and a bad one fails its first and rolls back; the password shows nowhere.
func TestAnalysisGatesEveryBatch(t *testing.T) {
	tests := []struct {
		name, image, wantReason string
		want                    corev1.ConditionStatus
	}{
		{"good image", clitest.AppV2, "Succeeded", corev1.ConditionTrue},
		{"errors", "registry.example/app:errors-1", "AnalysisFailed", corev1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newAnalysedWeb(t)
			before := recordPods(t, ns, "web")
			analysedRun(t, ns, "gate", tt.image)
			run := waitRun(t, ns, "gate", "done", isDone)
			c := succeeded(run)
			if c.Status != tt.want || c.Reason != tt.wantReason {
				t.Fatalf("CustomRun %s/gate: Succeeded %s %s: %s; want %s %s", ns, c.Status, c.Reason, c.Message, tt.want, tt.wantReason)
			}
			p := progress(t, &run.Status)
			verdict, _ := p["verdict"].(map[string]any)
			if tt.want == corev1.ConditionTrue && (verdict["batch"] != float64(2) || verdict["verdict"] != "Pass") {
				t.Errorf("CustomRun %s/gate: extraFields verdict %v, want batch 2 Pass", ns, verdict)
			}
			if tt.want == corev1.ConditionFalse {
				if verdict["batch"] != float64(1) || verdict["verdict"] != "Fail" {
					t.Errorf("CustomRun %s/gate: extraFields verdict %v, want batch 1 Fail", ns, verdict)
				}
				checkBackOnV1(t, ns, before)
			}
			noPassword(t, ns)
		})
	}
}

// TestPausedBatchAcceptedByAnnotation: with no traffic the analysis is inconclusive, and the run
// pauses (the default); annotating the CustomRun with the paused batch accepts it, and the
// rollout goes on to its end.
func TestPausedBatchAcceptedByAnnotation(t *testing.T) {
	ns := newAnalysedWeb(t)
	env.Sim.SetTraffic(false)
	t.Cleanup(func() { env.Sim.SetTraffic(true) })
	time.Sleep(6 * time.Second) // the rate window drains
	analysedRun(t, ns, "pause", clitest.AppV2)
	for batch := 1; batch <= 2; batch++ {
		run := waitRun(t, ns, "pause", "paused", func(r *v1beta1.CustomRun) bool {
			v, _ := progress(t, &r.Status)["verdict"].(map[string]any)
			return r.IsDone() || progress(t, &r.Status)["phase"] == "Paused" && v["batch"] == float64(batch)
		})
		c := succeeded(run)
		if run.IsDone() || c.Reason != "Paused" || !strings.Contains(c.Message, "inplace-rollout.io/accept-batch="+string(rune('0'+batch))) {
			t.Fatalf("CustomRun %s/pause: Succeeded %s %s: %s; want Unknown Paused on batch %d, saying how to accept it", ns, c.Status, c.Reason, c.Message, batch)
		}
		patch := []byte(`{"metadata":{"annotations":{"inplace-rollout.io/accept-batch":"` + string(rune('0'+batch)) + `"}}}`)
		if _, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Patch(context.Background(), "pause", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := waitRun(t, ns, "pause", "done", isDone)
	if c := succeeded(run); c.Status != corev1.ConditionTrue {
		t.Fatalf("CustomRun %s/pause: Succeeded %s %s: %s; want True after both batches were accepted", ns, c.Status, c.Reason, c.Message)
	}
	if imgs := podImages(t, ns, "web"); imgs[clitest.AppV2] != 4 {
		t.Errorf("pods by image: %v, want all 4 on %s", imgs, clitest.AppV2)
	}
}

// noPassword fails if the Prometheus password shows in the namespace's CustomRuns, Events or
// the StatefulSet, or in the controller's log.
func noPassword(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var texts []string
	runs, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs.Items {
		status, _ := json.Marshal(r.Status)
		texts = append(texts, string(status), r.Annotations[""])
	}
	events, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		texts = append(texts, e.Message)
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	annotations, _ := json.Marshal(sts.Annotations)
	texts = append(texts, string(annotations))
	log, err := os.ReadFile(controller.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, string(log))
	for _, s := range texts {
		if strings.Contains(s, promPassword) {
			t.Errorf("the Prometheus password shows in %q", s)
		}
	}
}
