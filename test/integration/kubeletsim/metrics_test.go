package kubeletsim

import (
	"maps"
	"math"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// metricsSim is a simulator without an apiserver: pods are added and synced directly, on a
// clock the test moves.
type metricsSim struct {
	t    *testing.T
	s    *Simulator
	now  time.Time
	pods []*corev1.Pod
}

func newMetricsSim(t *testing.T) *metricsSim {
	t.Helper()
	s, err := New(nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := &metricsSim{t: t, s: s, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = func() time.Time { return m.now }
	return m
}

// addPod starts simulating a one-container pod named name in namespace shop.
func (m *metricsSim) addPod(name, image string, limits corev1.ResourceList) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: image, Resources: corev1.ResourceRequirements{Limits: limits},
		}}},
	}
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.pods[pod.UID] = newPodSim(pod, m.s.allocatePodIP(0), m.s.hostIP(0), m.now)
	m.pods = append(m.pods, pod)
}

// advance moves the clock by d and does one kubelet step for every pod, as syncPod does.
func (m *metricsSim) advance(d time.Duration) {
	m.now = m.now.Add(d)
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.tickLocked(m.now)
	for _, pod := range m.pods {
		m.s.pods[pod.UID].sync(pod, m.now, m.s.t, &m.s.reg)
	}
}

// series is one exposed time series; a histogram keeps its buckets and count apart from value.
type series struct {
	kind    string
	labels  map[string]string
	value   float64
	buckets []bucket // cumulative, by upper bound, ending with +Inf
	count   uint64
}

type bucket struct {
	le    float64
	count uint64
}

// scrape reads /metrics from the simulator's handler and returns its series by metric name.
func (m *metricsSim) scrape() map[string][]series {
	m.t.Helper()
	rec := httptest.NewRecorder()
	m.s.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		m.t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		m.t.Fatalf("parsing the exposition: %v", err)
	}
	out := map[string][]series{}
	for name, f := range families {
		for _, metric := range f.GetMetric() {
			s := series{kind: f.GetType().String(), labels: map[string]string{}}
			for _, l := range metric.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case metric.GetCounter() != nil:
				s.value = metric.GetCounter().GetValue()
			case metric.GetGauge() != nil:
				s.value = metric.GetGauge().GetValue()
			case metric.GetHistogram() != nil:
				h := metric.GetHistogram()
				s.count = h.GetSampleCount()
				for _, b := range h.GetBucket() {
					s.buckets = append(s.buckets, bucket{b.GetUpperBound(), b.GetCumulativeCount()})
				}
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

// get returns the series of name whose labels include want.
func get(t *testing.T, metrics map[string][]series, name string, want map[string]string) series {
	t.Helper()
	var found []series
	for _, s := range metrics[name] {
		match := true
		for k, v := range want {
			match = match && s.labels[k] == v
		}
		if match {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, want, len(found))
	}
	return found[0]
}

// quantile estimates a quantile from cumulative buckets as Prometheus' histogram_quantile
// does: linear interpolation inside the bucket the rank falls in.
func quantile(q float64, buckets []bucket) float64 {
	total := float64(buckets[len(buckets)-1].count)
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range buckets {
		if float64(b.count) >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			return lo + (b.le-lo)*(rank-below)/(float64(b.count)-below)
		}
		lo, below = b.le, float64(b.count)
	}
	return math.NaN()
}

func TestMetricsExposition(t *testing.T) {
	m := newMetricsSim(t)
	m.addPod("web-0", "registry.example/app:v1", corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("500m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	})
	m.addPod("web-1", "registry.example/app:errors-v2", nil)
	m.addPod("web-2", "registry.example/app:latency-v2", nil)
	m.advance(0)
	m.advance(time.Second) // every container is ready after the pull and start delays
	m.advance(time.Minute)
	first := m.scrape()
	m.advance(30 * time.Second)
	second := m.scrape()

	t.Run("names and labels", func(t *testing.T) {
		want := map[string]struct {
			kind   string
			labels []string
		}{
			"http_requests_total":                {"COUNTER", []string{"namespace", "pod", "code"}},
			"http_request_duration_seconds":      {"HISTOGRAM", []string{"namespace", "pod"}},
			"container_cpu_usage_seconds_total":  {"COUNTER", []string{"namespace", "pod", "container"}},
			"container_memory_working_set_bytes": {"GAUGE", []string{"namespace", "pod", "container"}},
			"kube_pod_container_resource_limits": {"GAUGE", []string{"namespace", "pod", "container", "resource", "unit"}},
		}
		if names := slices.Sorted(maps.Keys(second)); len(names) != len(want) {
			t.Errorf("metric names %v, want the %d documented ones", names, len(want))
		}
		for name, w := range want {
			if len(second[name]) == 0 {
				t.Errorf("%s is missing", name)
			}
			for _, s := range second[name] {
				got := slices.Sorted(maps.Keys(s.labels))
				wantLabels := slices.Sorted(slices.Values(w.labels))
				if s.kind != w.kind || !slices.Equal(got, wantLabels) {
					t.Errorf("%s: %s with labels %v, want %s with %v", name, s.kind, got, w.kind, wantLabels)
				}
			}
		}
	})

	t.Run("counters rise with time", func(t *testing.T) {
		rate := m.s.Config().RequestRate
		for _, tt := range []struct {
			name     string
			labels   map[string]string
			wantRise float64
		}{
			{"http_requests_total", map[string]string{"pod": "web-0", "code": "200"}, 30 * rate},
			{"http_requests_total", map[string]string{"pod": "web-1", "code": "500"}, 30 * rate * errorShare},
			{"container_cpu_usage_seconds_total", map[string]string{"pod": "web-2", "container": "app"}, 30 * 0.05},
		} {
			before := get(t, first, tt.name, tt.labels).value
			after := get(t, second, tt.name, tt.labels).value
			if rise := after - before; math.Abs(rise-tt.wantRise) > 1e-6*tt.wantRise {
				t.Errorf("%s%v rose by %g in 30s (%g to %g), want %g", tt.name, tt.labels, rise, before, after, tt.wantRise)
			}
		}
	})

	t.Run("error share", func(t *testing.T) {
		for _, tt := range []struct {
			pod  string
			want float64
		}{
			{"web-0", 0},
			{"web-1", 0.3},
			{"web-2", 0},
		} {
			ok := get(t, second, "http_requests_total", map[string]string{"pod": tt.pod, "code": "200"}).value
			bad := get(t, second, "http_requests_total", map[string]string{"pod": tt.pod, "code": "500"}).value
			if share := bad / (ok + bad); ok+bad == 0 || math.Abs(share-tt.want) > 0.01 {
				t.Errorf("%s: %g of %g requests are 5xx (%.3f), want %.2f", tt.pod, bad, ok+bad, share, tt.want)
			}
		}
	})

	t.Run("latency p99", func(t *testing.T) {
		for _, tt := range []struct {
			pod    string
			lo, hi float64
		}{
			{"web-0", 0.025, 0.05},
			{"web-1", 0.025, 0.05},
			{"web-2", 1.8, 2},
		} {
			h := get(t, second, "http_request_duration_seconds", map[string]string{"pod": tt.pod})
			if p99 := quantile(0.99, h.buckets); p99 < tt.lo || p99 > tt.hi {
				t.Errorf("%s: p99 %.3fs from buckets %v, want between %gs and %gs", tt.pod, p99, h.buckets, tt.lo, tt.hi)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		for _, tt := range []struct {
			resource, unit string
			want           float64
		}{
			{"cpu", "core", 0.5},
			{"memory", "byte", 128 << 20},
		} {
			got := get(t, second, "kube_pod_container_resource_limits",
				map[string]string{"pod": "web-0", "container": "app", "resource": tt.resource, "unit": tt.unit}).value
			if got != tt.want {
				t.Errorf("web-0 %s limit = %g, want %g", tt.resource, got, tt.want)
			}
		}
		for _, s := range second["kube_pod_container_resource_limits"] {
			if s.labels["pod"] != "web-0" {
				t.Errorf("limit exposed for %s, which declares none: %v", s.labels["pod"], s.labels)
			}
		}
	})
}

// TestLatencyHistogramConsistent scrapes often, at uneven times, so that the fractional
// counts land just around integers: every scrape must show cumulative buckets that never
// decrease and a count equal to the +Inf bucket.
func TestLatencyHistogramConsistent(t *testing.T) {
	m := newMetricsSim(t)
	m.addPod("web-0", "registry.example/app:v1", nil)
	m.addPod("web-1", "registry.example/app:errors-v2", nil)
	m.addPod("web-2", "registry.example/app:latency-v2", nil)
	m.advance(0)
	m.advance(time.Second)
	for i := range 500 {
		m.advance(time.Duration(50+i%7*13) * time.Millisecond)
		for _, h := range m.scrape()["http_request_duration_seconds"] {
			var problems []string
			for j := 1; j < len(h.buckets); j++ {
				if h.buckets[j].count < h.buckets[j-1].count {
					problems = append(problems, "bucket le="+strconv.FormatFloat(h.buckets[j].le, 'g', -1, 64)+" below the one before")
				}
			}
			if last := h.buckets[len(h.buckets)-1]; !math.IsInf(last.le, 1) || last.count != h.count {
				problems = append(problems, "count differs from the +Inf bucket")
			}
			if len(problems) > 0 {
				t.Fatalf("scrape %d, %s: %s; count %d, buckets %v", i, h.labels["pod"], strings.Join(problems, ", "), h.count, h.buckets)
			}
		}
	}
}
