// Package metrics exposes the rollout engine's events as Prometheus metrics, on a registry the
// driver owns: the Argo plugin process and the Tekton controller serve it on /metrics.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Metric names.
const (
	PodsUpdated      = "inplace_rollout_pods_updated_total"
	Rollbacks        = "inplace_rollout_rollbacks_total"
	BatchDuration    = "inplace_rollout_batch_duration_seconds"
	AnalysisVerdicts = "inplace_rollout_analysis_verdicts_total"
)

// Recorder is a rollout.Metrics that keeps the engine's events as Prometheus metrics, each
// labelled with the workload's namespace and KIND/NAME.
type Recorder struct {
	podsUpdated *prometheus.CounterVec
	rollbacks   *prometheus.CounterVec
	batches     *prometheus.HistogramVec
	verdicts    *prometheus.CounterVec
}

var _ rollout.Metrics = (*Recorder)(nil)

// batchBuckets span a batch of a few seconds to one soaked and analysed for an hour.
var batchBuckets = []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New registers the metrics on reg and returns their Recorder.
func New(reg prometheus.Registerer) (*Recorder, error) {
	labels := []string{"namespace", "workload"}
	r := &Recorder{
		podsUpdated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: PodsUpdated,
			Help: "Pods updated in place: on the new images and Ready, as the rollout's lock records their count."}, labels),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: Rollbacks,
			Help: "Rollbacks that ended with the workload restored to its previous images."}, labels),
		batches: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: BatchDuration,
			Help:    "Time from a batch's first pod update starting to its last pod updated.",
			Buckets: batchBuckets}, labels),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: AnalysisVerdicts,
			Help: "Batch analyses ended, by verdict (Pass, Fail, Inconclusive, Error)."}, append(labels, "verdict")),
	}
	for _, c := range []prometheus.Collector{r.podsUpdated, r.rollbacks, r.batches, r.verdicts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// NewRegistry is a registry with the process and Go runtime collectors and the Recorder's
// metrics, for a driver to serve with Handler.
func NewRegistry() (*prometheus.Registry, *Recorder) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	r, err := New(reg)
	if err != nil {
		// A fresh registry holds none of these names.
		panic(err)
	}
	return reg, r
}

// Handler serves reg's metrics in the Prometheus exposition format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

func values(ref workload.Ref) []string {
	return []string{ref.Namespace, rollout.WorkloadName(ref)}
}

// PodsUpdated counts n pods of ref updated.
func (r *Recorder) PodsUpdated(ref workload.Ref, n int) {
	r.podsUpdated.WithLabelValues(values(ref)...).Add(float64(n))
}

// RolledBack counts a rollback of ref.
func (r *Recorder) RolledBack(ref workload.Ref) {
	r.rollbacks.WithLabelValues(values(ref)...).Inc()
}

// BatchDone observes a batch of ref that took d.
func (r *Recorder) BatchDone(ref workload.Ref, d time.Duration) {
	r.batches.WithLabelValues(values(ref)...).Observe(d.Seconds())
}

// Verdict counts an analysis of ref that ended with verdict.
func (r *Recorder) Verdict(ref workload.Ref, verdict string) {
	r.verdicts.WithLabelValues(append(values(ref), verdict)...).Inc()
}
