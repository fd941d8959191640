package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestRecorder(t *testing.T) {
	web := workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	agents := workload.Ref{Kind: workload.Pods, Namespace: "ops", Selector: "app=agent"}
	tests := []struct {
		name   string
		events func(r *Recorder)
		metric string
		want   string
	}{
		{
			name: "pods updated add up per workload",
			events: func(r *Recorder) {
				r.PodsUpdated(web, 2)
				r.PodsUpdated(web, 1)
				r.PodsUpdated(agents, 4)
			},
			metric: PodsUpdated,
			want: `
# HELP inplace_rollout_pods_updated_total Pods updated in place: on the new images and Ready, as the rollout's lock records their count.
# TYPE inplace_rollout_pods_updated_total counter
inplace_rollout_pods_updated_total{namespace="ops",workload="Pods/app=agent"} 4
inplace_rollout_pods_updated_total{namespace="shop",workload="StatefulSet/web"} 3
`,
		},
		{
			name:   "rollbacks",
			events: func(r *Recorder) { r.RolledBack(web); r.RolledBack(web) },
			metric: Rollbacks,
			want: `
# HELP inplace_rollout_rollbacks_total Rollbacks that ended with the workload restored to its previous images.
# TYPE inplace_rollout_rollbacks_total counter
inplace_rollout_rollbacks_total{namespace="shop",workload="StatefulSet/web"} 2
`,
		},
		{
			name: "verdicts by verdict",
			events: func(r *Recorder) {
				r.Verdict(web, "Pass")
				r.Verdict(web, "Pass")
				r.Verdict(web, "Fail")
			},
			metric: AnalysisVerdicts,
			want: `
# HELP inplace_rollout_analysis_verdicts_total Batch analyses ended, by verdict (Pass, Fail, Inconclusive, Error).
# TYPE inplace_rollout_analysis_verdicts_total counter
inplace_rollout_analysis_verdicts_total{namespace="shop",verdict="Fail",workload="StatefulSet/web"} 1
inplace_rollout_analysis_verdicts_total{namespace="shop",verdict="Pass",workload="StatefulSet/web"} 2
`,
		},
		{
			name: "batch durations in seconds",
			events: func(r *Recorder) {
				r.BatchDone(web, 3*time.Second)
				r.BatchDone(web, 90*time.Second)
			},
			metric: BatchDuration,
			want: `
# HELP inplace_rollout_batch_duration_seconds Time from a batch's first pod update starting to its last pod updated.
# TYPE inplace_rollout_batch_duration_seconds histogram
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="1"} 0
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="2.5"} 0
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="5"} 1
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="10"} 1
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="30"} 1
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="60"} 1
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="120"} 2
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="300"} 2
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="600"} 2
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="1800"} 2
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="3600"} 2
inplace_rollout_batch_duration_seconds_bucket{namespace="shop",workload="StatefulSet/web",le="+Inf"} 2
inplace_rollout_batch_duration_seconds_sum{namespace="shop",workload="StatefulSet/web"} 93
inplace_rollout_batch_duration_seconds_count{namespace="shop",workload="StatefulSet/web"} 2
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			r, err := New(reg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			tt.events(r)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), tt.metric); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNewRegistersOnce checks that the metrics go on the registry given, not a global one: a
// second Recorder on the same registry is refused, one on another registry is not.
func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg); err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := New(reg); err == nil {
		t.Error("a second New on the same registry succeeded; want a duplicate registration error")
	}
	if _, err := New(prometheus.NewRegistry()); err != nil {
		t.Errorf("New on another registry: %v", err)
	}
}

func TestHandlerServesMetrics(t *testing.T) {
	reg, r := NewRegistry()
	r.PodsUpdated(workload.Ref{Kind: workload.Deployment, Namespace: "shop", Name: "api"}, 1)
	if err := testutil.ScrapeAndCompare(serve(t, reg), strings.NewReader(`
# HELP inplace_rollout_pods_updated_total Pods updated in place: on the new images and Ready, as the rollout's lock records their count.
# TYPE inplace_rollout_pods_updated_total counter
inplace_rollout_pods_updated_total{namespace="shop",workload="Deployment/api"} 1
`), PodsUpdated); err != nil {
		t.Error(err)
	}
}

// serve serves reg with Handler on a test server and returns its /metrics URL.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(Handler(reg))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}
