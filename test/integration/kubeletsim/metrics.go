package kubeletsim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// latencyBuckets are the upper bounds of http_request_duration_seconds.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10}

// Where a pod's requests fall in latencyBuckets: normal pods answer in 10-50 ms (p99 about
// 48 ms); latency* pods send a tenth of their requests into (1 s, 2 s], a p99 of about 1.9 s.
var (
	normalLatency = map[int]float64{2: 0.9, 3: 0.1}
	slowLatency   = map[int]float64{2: 0.9, 8: 0.1}
)

// errorShare is the fraction of 5xx answers from an errors* pod.
const errorShare = 0.3

// trafficCounters accumulate a pod's simulated requests. Counts are fractional so that any
// rate and tick length add up exactly; Prometheus counters are floats anyway.
type trafficCounters struct {
	last    time.Time
	ok, bad float64
	buckets []float64 // per bucket, not cumulative
	sum     float64
	cpu     map[string]float64
}

// tickLocked advances every pod's counters to now. Callers hold s.mu.
func (s *Simulator) tickLocked(now time.Time) {
	for _, p := range s.pods {
		s.tickPodLocked(p, now)
	}
}

// tickPodLocked advances p's counters to now, at the rates its state gives. A pod's state
// changes only in its sync, which ticks it first: ticking it alone there, and every pod when
// the metrics are read, counts exactly what ticking every pod at every sync would, at a cost
// that does not grow with the number of pods. Callers hold s.mu.
func (s *Simulator) tickPodLocked(p *podSim, now time.Time) {
	tc := &p.traffic
	if tc.last.IsZero() {
		tc.last = now
		return
	}
	dt := now.Sub(tc.last).Seconds()
	tc.last = now
	if dt <= 0 {
		return
	}
	if tc.cpu == nil {
		tc.cpu = map[string]float64{}
	}
	var errs, slow bool
	for name, c := range p.containers {
		if c.running() {
			tc.cpu[name] += 0.05 * dt
		}
		if c.ready() {
			errs = errs || c.beh.errors
			slow = slow || c.beh.latency
		}
	}
	if !s.traffic || !p.ready {
		return
	}
	n := s.cfg.RequestRate * dt
	share := 0.0
	if errs {
		share = errorShare
	}
	tc.bad += n * share
	tc.ok += n * (1 - share)
	dist := normalLatency
	if slow {
		dist = slowLatency
	}
	if tc.buckets == nil {
		tc.buckets = make([]float64, len(latencyBuckets)+1)
	}
	for i, f := range dist {
		tc.buckets[i] += n * f
		lo := 0.0
		if i > 0 {
			lo = latencyBuckets[i-1]
		}
		tc.sum += n * f * (lo + latencyBuckets[i]) / 2
	}
}

var (
	descRequests = prometheus.NewDesc("http_requests_total", "HTTP requests served by the pod, by status code.",
		[]string{"namespace", "pod", "code"}, nil)
	descLatency = prometheus.NewDesc("http_request_duration_seconds", "HTTP request latency of the pod.",
		[]string{"namespace", "pod"}, nil)
	descCPU = prometheus.NewDesc("container_cpu_usage_seconds_total", "CPU time used by the container.",
		[]string{"namespace", "pod", "container"}, nil)
	descMemory = prometheus.NewDesc("container_memory_working_set_bytes", "Working set of the container.",
		[]string{"namespace", "pod", "container"}, nil)
	descLimits = prometheus.NewDesc("kube_pod_container_resource_limits", "Resource limits of the container.",
		[]string{"namespace", "pod", "container", "resource", "unit"}, nil)
)

// collector exposes the simulator's pods to Prometheus.
type collector struct{ s *Simulator }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descLatency, descCPU, descMemory, descLimits} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked(s.now())
	pods := make([]*podSim, 0, len(s.pods))
	for _, p := range s.pods {
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].namespace != pods[j].namespace {
			return pods[i].namespace < pods[j].namespace
		}
		return pods[i].name < pods[j].name
	})
	for _, p := range pods {
		tc := &p.traffic
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, tc.ok, p.namespace, p.name, "200")
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, tc.bad, p.namespace, p.name, "500")
		// Every count, the total included, truncates one running sum of the buckets: truncated
		// apart (the total from ok+bad), float rounding could put +Inf below le="10".
		cumulative := make(map[float64]uint64, len(latencyBuckets))
		var running float64
		for i, ub := range latencyBuckets {
			if tc.buckets != nil {
				running += tc.buckets[i]
			}
			cumulative[ub] = uint64(running)
		}
		if tc.buckets != nil {
			running += tc.buckets[len(latencyBuckets)]
		}
		ch <- prometheus.MustNewConstHistogram(descLatency, uint64(running), tc.sum, cumulative, p.namespace, p.name)
		for name, container := range p.containers {
			ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, tc.cpu[name], p.namespace, p.name, name)
			if container.running() {
				ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, 64<<20, p.namespace, p.name, name)
			}
		}
		for _, l := range p.limits {
			ch <- prometheus.MustNewConstMetric(descLimits, prometheus.GaugeValue, l.value, p.namespace, p.name, l.container, l.resource, l.unit)
		}
	}
}

// handler serves /metrics, /healthz and the control endpoints a test process uses when the
// simulator runs as a separate process: POST /retag?image=REF&digest=sha256:HEX and
// POST /traffic?enabled=true|false.
func (s *Simulator) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /retag", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Retag(r.URL.Query().Get("image"), r.URL.Query().Get("digest")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /traffic", func(w http.ResponseWriter, r *http.Request) {
		on, err := strconv.ParseBool(r.URL.Query().Get("enabled"))
		if err != nil {
			http.Error(w, "enabled must be true or false", http.StatusBadRequest)
			return
		}
		s.SetTraffic(on)
		fmt.Fprintln(w, "ok")
	})
	return mux
}
