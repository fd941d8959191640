package argo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// errorRateTemplate is an AnalysisTemplate on Argo's Prometheus provider that fails when more
// than 4% of the namespace's requests are 5xx, as examples/argo/holds-with-analysis.yaml's.
// The harness gives the controller no ARGO_ROLLOUTS_PROMETHEUS_ADDRESS, so the address is in
// the template.
func errorRateTemplate(ns string) *rolloutsv1alpha1.AnalysisTemplate {
	return &rolloutsv1alpha1.AnalysisTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "error-rate", Namespace: ns},
		Spec: rolloutsv1alpha1.AnalysisTemplateSpec{
			Args: []rolloutsv1alpha1.Argument{{Name: "namespace"}},
			Metrics: []rolloutsv1alpha1.Metric{{
				Name:             "error-rate",
				Interval:         "5s",
				Count:            ptr.To(intstr.FromInt32(3)),
				FailureLimit:     ptr.To(intstr.FromInt32(0)),
				SuccessCondition: "len(result) == 0 || result[0] < 0.04",
				Provider: rolloutsv1alpha1.MetricProvider{Prometheus: &rolloutsv1alpha1.PrometheusMetric{
					Address: env.PrometheusURL,
					Query: `sum(rate(http_requests_total{namespace="{{args.namespace}}",code=~"5.."}[30s]))
/
sum(rate(http_requests_total{namespace="{{args.namespace}}"}[30s]))`,
				}},
			}},
		},
	}
}

// TestStepAnalysisTemplateFailsAndRollsBack: an errors image (30% 5xx) held at 33% by an upTo
// step fails the Argo AnalysisTemplate of the step after it; the Rollout aborts and every pod
// the first step updated is back on its old image.
func TestStepAnalysisTemplateFailsAndRollsBack(t *testing.T) {
	t.Parallel()
	began := time.Now()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", replicas)
	before := podStates(t, ns, "web")
	history := recordImages(t, ns, "web")
	ac := argoClient(t).ArgoprojV1alpha1()
	if _, err := ac.AnalysisTemplates(ns).Create(context.Background(), errorRateTemplate(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating AnalysisTemplate %s/error-rate: %v", ns, err)
	}
	createRollout(t, ns, "web", clitest.AppV1, oneStep("web", nil))
	waitTraffic(t, ns)

	const errs = "registry.example/app:errors-2"
	analysisStep := rolloutsv1alpha1.CanaryStep{Analysis: &rolloutsv1alpha1.RolloutAnalysis{
		Templates: []rolloutsv1alpha1.AnalysisTemplateRef{{TemplateName: "error-rate"}},
		Args:      []rolloutsv1alpha1.AnalysisRunArgument{{Name: "namespace", Value: ns}},
	}}
	old := setImageSteps(t, ns, "web", errs, []rolloutsv1alpha1.CanaryStep{
		step(t, stepConfig("web", errs, map[string]any{"upTo": "33%"})),
		analysisStep,
		step(t, stepConfig("web", errs, nil)),
	})
	ro := abortedOn(t, ns, "web", old)
	// Argo puts the step index back to 0 on an abort: its message says which step aborted.
	if !strings.Contains(ro.Status.Message, "Step-based analysis") {
		t.Errorf("the Rollout was not aborted by its analysis step: %s", describeRollout(ro))
	}
	runs, err := ac.AnalysisRuns(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	failed := false
	for _, r := range runs.Items {
		phases = append(phases, fmt.Sprintf("%s %s %q", r.Name, r.Status.Phase, r.Status.Message))
		failed = failed || r.Status.Phase == rolloutsv1alpha1.AnalysisPhaseFailed
	}
	if !failed {
		t.Errorf("no AnalysisRun Failed: %v", phases)
	}
	waitRolledBack(t, ns, "web", before, 2*time.Minute)
	if n := specImages(t, ns, "web", errs); n != 0 {
		t.Errorf("%d pods' specs still on %s", n, errs)
	}
	touched := 0
	for pod := range before {
		for _, img := range history.of(pod) {
			if img == errs {
				touched++
			}
		}
	}
	if touched != 2 {
		t.Errorf("%d pods were given %s, want 2, the upTo step's 33%% of %d", touched, errs, replicas)
	}
	t.Logf("AnalysisRuns %v; 33%% on %s, analysis failed, rolled back in %s", phases, errs, time.Since(began).Round(100*time.Millisecond))
}
