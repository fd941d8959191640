package analysis

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is what the fake querier returns for a query.
type answer struct {
	v   float64
	ok  bool
	err error
}

func value(v float64) answer       { return answer{v: v, ok: true} }
func queryError(msg string) answer { return answer{err: errors.New(msg)} }

var (
	noData = answer{}
	// nan is how a Querier reports NaN: ok false.
	nan = answer{v: math.NaN()}
)

// rule answers the queries that equal exact or, without exact, hold every substring. Its
// answers are given in turn; the last one repeats.
type rule struct {
	exact    string
	contains []string
	answers  []answer
	used     int
}

func (r *rule) matches(q string) bool {
	if r.exact != "" {
		return q == r.exact
	}
	for _, s := range r.contains {
		if !strings.Contains(q, s) {
			return false
		}
	}
	return true
}

// fakeQuerier answers by the first matching rule and records every query it got.
type fakeQuerier struct {
	rules     []*rule
	got       []string
	unmatched []string
}

func (f *fakeQuerier) exact(q string, a ...answer) *fakeQuerier {
	f.rules = append(f.rules, &rule{exact: q, answers: a})
	return f
}

func (f *fakeQuerier) on(substrings []string, a ...answer) *fakeQuerier {
	f.rules = append(f.rules, &rule{contains: substrings, answers: a})
	return f
}

func (f *fakeQuerier) Query(_ context.Context, q string) (float64, bool, error) {
	f.got = append(f.got, q)
	for _, r := range f.rules {
		if r.matches(q) {
			if len(r.answers) == 0 {
				panic("fake querier: a rule without answers")
			}
			a := r.answers[min(r.used, len(r.answers)-1)]
			r.used++
			return a.v, a.ok, a.err
		}
	}
	f.unmatched = append(f.unmatched, q)
	return 0, false, fmt.Errorf("fake querier: nothing answers %q", q)
}

func (f *fakeQuerier) allMatched(t *testing.T) {
	t.Helper()
	for _, q := range f.unmatched {
		t.Errorf("unexpected query %q", q)
	}
}

func fp(v float64) *float64 { return &v }
func ip(v int) *int         { return &v }

// onlyChecks is a configuration with the given checks and every other built-in disabled.
func onlyChecks(c Checks) *Config {
	if c.ErrorRate == nil {
		c.ErrorRate = &ErrorRate{Disabled: true}
	}
	if c.Latency == nil {
		c.Latency = &Latency{Disabled: true}
	}
	if c.Traffic == nil {
		c.Traffic = &Traffic{Disabled: true}
	}
	if c.Saturation == nil {
		c.Saturation = &Saturation{Disabled: true}
	}
	return &Config{Checks: c}
}

// Substrings that tell the built-in queries and the two pod sets apart.
var (
	newPods    = `pod=~"web-new"`
	oldPods    = `pod=~"web-old"`
	errNew     = []string{`code=~"5.."`, newPods}
	errOld     = []string{`code=~"5.."`, oldPods}
	latNew     = []string{"histogram_quantile(0.99,", newPods}
	latOld     = []string{"histogram_quantile(0.99,", oldPods}
	trafficNew = []string{"sum(rate(http_requests_total{", newPods}
	limitsNew  = []string{"count(kube_pod_container_resource_limits{", newPods}
	cpuNew     = []string{"container_cpu_usage_seconds_total", newPods}
	memNew     = []string{"container_memory_working_set_bytes", newPods}
)

func testScope() Scope {
	return Scope{Namespace: "shop", Pods: []string{"web-new"}, StablePods: []string{"web-old"}, Window: time.Minute}
}

// Thresholds of the built-in checks with their default bounds.
const (
	thrErrorRate  = "max 0.05 ratio, max 0.02 ratio over the pods not yet updated"
	thrLatency    = "max 1 s, max 0.25 s over the pods not yet updated"
	thrTraffic    = "min 1 req/s"
	thrCPU        = "cpu at most 0.9 of the limit"
	thrMemory     = "memory at most 0.9 of the limit"
	thrSaturation = thrCPU + ", " + thrMemory
)

type wantResult struct {
	check     string
	verdict   Verdict
	threshold string // exactly; every verdict has one
	value     *float64
	stable    *float64
	message   string // substring; "" checks nothing
	query     string // substring of the result's query; "" checks nothing
}

func checkResult(t *testing.T, got CheckResult, want wantResult) {
	t.Helper()
	if got.Check != want.check || got.Verdict != want.verdict {
		t.Errorf("got %s %s (%s), want %s %s", got.Check, got.Verdict, got.Message, want.check, want.verdict)
	}
	sameFloat := func(what string, got, want *float64) {
		t.Helper()
		switch {
		case want == nil && got != nil:
			t.Errorf("%s = %v, want none", what, *got)
		case want != nil && got == nil:
			t.Errorf("%s = none, want %v", what, *want)
		case want != nil && *got != *want:
			t.Errorf("%s = %v, want %v", what, *got, *want)
		}
	}
	if got.Threshold != want.threshold {
		t.Errorf("%s %s: threshold %q, want %q", got.Check, got.Verdict, got.Threshold, want.threshold)
	}
	sameFloat("value", got.Value, want.value)
	sameFloat("stable", got.Stable, want.stable)
	if !strings.Contains(got.Message, want.message) {
		t.Errorf("message %q does not contain %q", got.Message, want.message)
	}
	if !strings.Contains(got.Query, want.query) {
		t.Errorf("query %q does not contain %q", got.Query, want.query)
	}
}

func TestMeasure(t *testing.T) {
	tests := []struct {
		name  string
		cfg   *Config
		scope func(*Scope)
		fake  func(f *fakeQuerier)
		want  []wantResult
		// queries is how many queries must be sent; notSent, substrings none of them may hold.
		queries int
		notSent []string
	}{
		// Error rate.
		{
			name:    "error rate above max fails without asking the stable pods",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.06)).on(errOld, value(0.06)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Fail, threshold: thrErrorRate, value: fp(0.06), message: "above the maximum 0.05", query: `namespace="shop"`}},
			queries: 1, notSent: []string{oldPods},
		},
		{
			name:    "error rate within max but too far above the stable pods fails",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.04)).on(errOld, value(0.01)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Fail, threshold: thrErrorRate, value: fp(0.04), stable: fp(0.01), message: "above the pods not yet updated"}},
			queries: 2,
		},
		{
			name:    "error rate within max and close to the stable pods passes",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.03)).on(errOld, value(0.02)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.03), stable: fp(0.02)}},
			queries: 2,
		},
		{
			name:    "error rate below the stable pods passes",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0)).on(errOld, value(0.04)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0), stable: fp(0.04)}},
			queries: 2,
		},
		{
			name:    "error rate equal to the default max passes",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			scope:   func(s *Scope) { s.StablePods = nil },
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.05)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.05)}},
			queries: 1,
		},
		{
			name:    "error rate equal to max and exactly maxIncrease above the stable pods passes",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{MaxRatio: fp(0.5), MaxIncrease: fp(0.25)}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.5)).on(errOld, value(0.25)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: "max 0.5 ratio, max 0.25 ratio over the pods not yet updated", value: fp(0.5), stable: fp(0.25)}},
			queries: 2,
		},
		{
			name:    "error rate just over maxIncrease above the stable pods fails",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{MaxRatio: fp(0.5), MaxIncrease: fp(0.25)}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.5)).on(errOld, value(0.2)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Fail, threshold: "max 0.5 ratio, max 0.25 ratio over the pods not yet updated", value: fp(0.5), stable: fp(0.2), message: "at most 0.25 allowed"}},
			queries: 2,
		},
		{
			name:    "error rate just over a configured max fails",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{MaxRatio: fp(0.5)}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.5000001)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Fail, threshold: "max 0.5 ratio, max 0.02 ratio over the pods not yet updated", value: fp(0.5000001), message: "above the maximum 0.5"}},
			queries: 1,
		},
		{
			name:    "without stable pods no stable query is sent",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			scope:   func(s *Scope) { s.StablePods = nil },
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.04)).on(errOld, value(0)) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.04)}},
			queries: 1, notSent: []string{"web-old"},
		},
		{
			name:    "stable pods without data are not compared",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, value(0.04)).on(errOld, noData) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.04)}},
			queries: 2,
		},
		{
			name: "a failed stable query is an error",
			cfg:  onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake: func(f *fakeQuerier) {
				f.on(errNew, value(0.01)).on(errOld, queryError("prometheus at http://p: timeout"))
			},
			want:    []wantResult{{check: CheckErrorRate, verdict: Error, threshold: thrErrorRate, value: fp(0.01), message: "pods not yet updated: prometheus at http://p: timeout"}},
			queries: 2,
		},
		{
			name:    "error rate without data is inconclusive",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, noData) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Inconclusive, threshold: thrErrorRate, message: "no data"}},
			queries: 1, notSent: []string{oldPods},
		},
		{
			name:    "a failed query is an error that keeps the message",
			cfg:     onlyChecks(Checks{ErrorRate: &ErrorRate{}}),
			fake:    func(f *fakeQuerier) { f.on(errNew, queryError("prometheus at http://prom:9090: connection refused")) },
			want:    []wantResult{{check: CheckErrorRate, verdict: Error, threshold: thrErrorRate, message: "prometheus at http://prom:9090: connection refused"}},
			queries: 1, notSent: []string{oldPods},
		},
		{
			name: "a configured error rate query replaces the built-in one",
			cfg:  onlyChecks(Checks{ErrorRate: &ErrorRate{Query: `errors{ns="{{.Namespace}}",pod=~"{{.Pods}}"}`}}),
			fake: func(f *fakeQuerier) {
				f.exact(`errors{ns="shop",pod=~"web-new"}`, value(0.02)).exact(`errors{ns="shop",pod=~"web-old"}`, value(0.01))
			},
			want:    []wantResult{{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.02), stable: fp(0.01), query: `errors{ns="shop",pod=~"{{.Pods}}"}`}},
			queries: 2, notSent: []string{"http_requests_total"},
		},

		// Latency.
		{
			name:    "latency above max fails",
			cfg:     onlyChecks(Checks{Latency: &Latency{}}),
			fake:    func(f *fakeQuerier) { f.on(latNew, value(1.5)).on(latOld, value(1.5)) },
			want:    []wantResult{{check: CheckLatency, verdict: Fail, threshold: thrLatency, value: fp(1.5), message: "1.5 s is above the maximum 1"}},
			queries: 1,
		},
		{
			name:    "latency at max and at maxIncrease above the stable pods passes",
			cfg:     onlyChecks(Checks{Latency: &Latency{}}),
			fake:    func(f *fakeQuerier) { f.on(latNew, value(1)).on(latOld, value(0.75)) },
			want:    []wantResult{{check: CheckLatency, verdict: Pass, threshold: thrLatency, value: fp(1), stable: fp(0.75)}},
			queries: 2,
		},
		{
			name:    "latency too far above the stable pods fails",
			cfg:     onlyChecks(Checks{Latency: &Latency{}}),
			fake:    func(f *fakeQuerier) { f.on(latNew, value(0.9)).on(latOld, value(0.5)) },
			want:    []wantResult{{check: CheckLatency, verdict: Fail, threshold: thrLatency, value: fp(0.9), stable: fp(0.5), message: "at most 0.25 allowed"}},
			queries: 2,
		},
		{
			name: "latency uses the configured quantile and bounds",
			cfg:  onlyChecks(Checks{Latency: &Latency{Quantile: fp(0.95), Max: fp(0.2), MaxIncrease: fp(0.05)}}),
			fake: func(f *fakeQuerier) {
				f.on([]string{"histogram_quantile(0.95,", newPods}, value(0.25)).on([]string{"histogram_quantile(0.95,", oldPods}, value(0.1))
			},
			want:    []wantResult{{check: CheckLatency, verdict: Fail, threshold: "max 0.2 s, max 0.05 s over the pods not yet updated", value: fp(0.25), message: "above the maximum 0.2", query: "histogram_quantile(0.95,"}},
			queries: 1, notSent: []string{"histogram_quantile(0.99,"},
		},
		{
			name:    "latency without data is inconclusive and names its bounds",
			cfg:     onlyChecks(Checks{Latency: &Latency{}}),
			fake:    func(f *fakeQuerier) { f.on(latNew, nan) },
			want:    []wantResult{{check: CheckLatency, verdict: Inconclusive, threshold: thrLatency, message: "no data"}},
			queries: 1,
		},
		{
			name:    "a failed latency query is an error that names its configured bounds",
			cfg:     onlyChecks(Checks{Latency: &Latency{Max: fp(2), MaxIncrease: fp(0.5)}}),
			fake:    func(f *fakeQuerier) { f.on(latNew, queryError("prometheus at http://p: no answer within 10s")) },
			want:    []wantResult{{check: CheckLatency, verdict: Error, threshold: "max 2 s, max 0.5 s over the pods not yet updated", message: "no answer within 10s"}},
			queries: 1,
		},

		// Traffic.
		{
			name:    "traffic below minRate is inconclusive",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, value(0.5)) },
			want:    []wantResult{{check: CheckTraffic, verdict: Inconclusive, threshold: thrTraffic, value: fp(0.5), message: "below the 1 req/s"}},
			queries: 1, notSent: []string{oldPods, `code=~"5.."`},
		},
		{
			name:    "traffic at minRate passes",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, value(1)) },
			want:    []wantResult{{check: CheckTraffic, verdict: Pass, threshold: thrTraffic, value: fp(1)}},
			queries: 1, notSent: []string{oldPods},
		},
		{
			name:    "traffic below a configured minRate is inconclusive",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{MinRate: fp(10)}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, value(9.5)) },
			want:    []wantResult{{check: CheckTraffic, verdict: Inconclusive, threshold: "min 10 req/s", value: fp(9.5), message: "below the 10 req/s"}},
			queries: 1,
		},
		{
			name:    "no traffic data is inconclusive",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, noData) },
			want:    []wantResult{{check: CheckTraffic, verdict: Inconclusive, threshold: thrTraffic, message: "no traffic measured"}},
			queries: 1,
		},
		{
			name:    "NaN traffic is inconclusive",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, nan) },
			want:    []wantResult{{check: CheckTraffic, verdict: Inconclusive, threshold: thrTraffic, message: "no traffic measured"}},
			queries: 1,
		},
		{
			name:    "a failed traffic query is an error",
			cfg:     onlyChecks(Checks{Traffic: &Traffic{}}),
			fake:    func(f *fakeQuerier) { f.on(trafficNew, queryError("prometheus at http://p: server_error (HTTP 503)")) },
			want:    []wantResult{{check: CheckTraffic, verdict: Error, threshold: thrTraffic, message: "HTTP 503"}},
			queries: 1,
		},

		// Saturation.
		{
			name:    "saturation without limits is skipped",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(0)).on(cpuNew, value(5)).on(memNew, value(5)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Skipped, threshold: thrSaturation, message: "no CPU or memory limits"}},
			queries: 1, notSent: []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes"},
		},
		{
			name:    "saturation with an empty limits count is skipped",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, noData).on(cpuNew, value(5)).on(memNew, value(5)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Skipped, threshold: thrSaturation, query: "count(kube_pod_container_resource_limits"}},
			queries: 1,
		},
		{
			name:    "saturation with cpu over the limit fails",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(4)).on(cpuNew, value(0.95)).on(memNew, value(0.1)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Fail, threshold: thrCPU, value: fp(0.95), message: "cpu at 0.95 of the limit", query: "container_cpu_usage_seconds_total"}},
			queries: 2,
		},
		{
			name:    "saturation with memory over the limit fails",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(4)).on(cpuNew, value(0.1)).on(memNew, value(0.91)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Fail, threshold: thrMemory, value: fp(0.91), message: "memory at 0.91"}},
			queries: 3,
		},
		{
			name:    "saturation at the limit passes, reporting the higher use",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(4)).on(cpuNew, value(0.9)).on(memNew, value(0.3)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Pass, threshold: thrCPU, value: fp(0.9), query: "container_cpu_usage_seconds_total"}},
			queries: 3,
		},
		{
			name:    "saturation under the limits passes, reporting the higher use",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(4)).on(cpuNew, value(0.2)).on(memNew, value(0.7)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Pass, threshold: thrMemory, value: fp(0.7), query: "container_memory_working_set_bytes"}},
			queries: 3,
		},
		{
			name:    "saturation with a limit on memory only passes on memory",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(1)).on(cpuNew, noData).on(memNew, value(0.4)) },
			want:    []wantResult{{check: CheckSaturation, verdict: Pass, threshold: thrMemory, value: fp(0.4)}},
			queries: 3,
		},
		{
			name:    "saturation with limits but no usage data is inconclusive",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, value(2)).on(cpuNew, noData).on(memNew, nan) },
			want:    []wantResult{{check: CheckSaturation, verdict: Inconclusive, threshold: thrSaturation, message: "limits are set but no usage was measured"}},
			queries: 3,
		},
		{
			name:    "a failed limits query is an error",
			cfg:     onlyChecks(Checks{Saturation: &Saturation{}}),
			fake:    func(f *fakeQuerier) { f.on(limitsNew, queryError("limits: boom")) },
			want:    []wantResult{{check: CheckSaturation, verdict: Error, threshold: thrSaturation, message: "limits: boom"}},
			queries: 1,
		},
		{
			name: "a failed usage query is an error",
			cfg:  onlyChecks(Checks{Saturation: &Saturation{}}),
			fake: func(f *fakeQuerier) {
				f.on(limitsNew, value(2)).on(cpuNew, queryError("cpu: boom")).on(memNew, value(0.1))
			},
			want:    []wantResult{{check: CheckSaturation, verdict: Error, threshold: thrCPU, message: "cpu: boom"}},
			queries: 2,
		},
		{
			name: "saturation uses configured bounds and queries",
			cfg: onlyChecks(Checks{Saturation: &Saturation{
				CPUQuery: `cpu{pod=~"{{.Pods}}"}`, MemoryQuery: `mem{pod=~"{{.Pods}}"}`, MaxCPU: fp(0.5), MaxMemory: fp(0.95),
			}}),
			fake: func(f *fakeQuerier) {
				f.on(limitsNew, value(2)).exact(`cpu{pod=~"web-new"}`, value(0.4)).exact(`mem{pod=~"web-new"}`, value(0.94))
			},
			want:    []wantResult{{check: CheckSaturation, verdict: Pass, threshold: "memory at most 0.95 of the limit", value: fp(0.94), query: `mem{pod=~"{{.Pods}}"}`}},
			queries: 3, notSent: []string{"container_cpu_usage_seconds_total", oldPods},
		},

		// Custom checks.
		{
			name:    "custom condition holds",
			cfg:     onlyChecks(Checks{Custom: []Custom{{Name: "queue", Query: `q{pod=~"{{.Pods}}"}`, Condition: "result < 100"}}}),
			fake:    func(f *fakeQuerier) { f.exact(`q{pod=~"web-new"}`, value(99)) },
			want:    []wantResult{{check: "queue", verdict: Pass, threshold: "result < 100", value: fp(99)}},
			queries: 1,
		},
		{
			name:    "custom condition does not hold",
			cfg:     onlyChecks(Checks{Custom: []Custom{{Name: "queue", Query: `q{pod=~"{{.Pods}}"}`, Condition: "result < 100"}}}),
			fake:    func(f *fakeQuerier) { f.exact(`q{pod=~"web-new"}`, value(100)) },
			want:    []wantResult{{check: "queue", verdict: Fail, threshold: "result < 100", value: fp(100), message: "does not satisfy result < 100"}},
			queries: 1,
		},
		{
			name: "custom range condition",
			cfg: onlyChecks(Checks{Custom: []Custom{
				{Name: "in", Query: "a", Condition: "result >= 1 && result <= 10"},
				{Name: "out", Query: "b", Condition: "result >= 1 && result <= 10"},
			}}),
			fake:    func(f *fakeQuerier) { f.exact("a", value(10)).exact("b", value(10.5)) },
			want:    []wantResult{{check: "in", verdict: Pass, threshold: "result >= 1 && result <= 10", value: fp(10)}, {check: "out", verdict: Fail, threshold: "result >= 1 && result <= 10", value: fp(10.5)}},
			queries: 2,
		},
		{
			name:    "custom without data is inconclusive",
			cfg:     onlyChecks(Checks{Custom: []Custom{{Name: "c", Query: "c", Condition: "result > 0"}}}),
			fake:    func(f *fakeQuerier) { f.exact("c", nan) },
			want:    []wantResult{{check: "c", verdict: Inconclusive, threshold: "result > 0", message: "no data"}},
			queries: 1,
		},
		{
			name:    "a failed custom query is an error",
			cfg:     onlyChecks(Checks{Custom: []Custom{{Name: "c", Query: "c", Condition: "result > 0"}}}),
			fake:    func(f *fakeQuerier) { f.exact("c", queryError("bad_data: parse error")) },
			want:    []wantResult{{check: "c", verdict: Error, threshold: "result > 0", message: "bad_data: parse error"}},
			queries: 1,
		},
		{
			name:    "a custom query that does not render is an error and is not sent",
			cfg:     onlyChecks(Checks{Custom: []Custom{{Name: "c", Query: `c{x="{{.Nope}}"}`, Condition: "result > 0"}}}),
			fake:    func(f *fakeQuerier) {},
			want:    []wantResult{{check: "c", verdict: Error, threshold: "result > 0", message: "Nope"}},
			queries: 0,
		},

		// Enabled and disabled checks.
		{
			name:    "disabled checks are not measured",
			cfg:     onlyChecks(Checks{}),
			fake:    func(f *fakeQuerier) {},
			queries: 0,
		},
		{
			name: "every built-in check is on by default, in order",
			cfg:  &Config{},
			fake: func(f *fakeQuerier) {
				f.on(errNew, value(0.01)).on(errOld, value(0.01)).
					on(latNew, value(0.1)).on(latOld, value(0.1)).
					on(trafficNew, value(50)).
					on(limitsNew, value(2)).on(cpuNew, value(0.5)).on(memNew, value(0.25))
			},
			want: []wantResult{
				{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.01), stable: fp(0.01)},
				{check: CheckLatency, verdict: Pass, threshold: thrLatency, value: fp(0.1), stable: fp(0.1)},
				{check: CheckTraffic, verdict: Pass, threshold: thrTraffic, value: fp(50)},
				{check: CheckSaturation, verdict: Pass, threshold: thrCPU, value: fp(0.5)},
			},
			queries: 8,
		},
		{
			name: "a disabled built-in is skipped and custom checks follow the built-ins",
			cfg: &Config{Checks: Checks{
				Latency: &Latency{Disabled: true}, Saturation: &Saturation{Disabled: true},
				Custom: []Custom{{Name: "c", Query: "c", Condition: "result == 1"}},
			}},
			scope: func(s *Scope) { s.StablePods = nil },
			fake: func(f *fakeQuerier) {
				f.on(errNew, value(0.01)).on(trafficNew, value(50)).exact("c", value(1))
			},
			want: []wantResult{
				{check: CheckErrorRate, verdict: Pass, threshold: thrErrorRate, value: fp(0.01)},
				{check: CheckTraffic, verdict: Pass, threshold: thrTraffic, value: fp(50)},
				{check: "c", verdict: Pass, threshold: "result == 1", value: fp(1)},
			},
			queries: 3, notSent: []string{"histogram_quantile", "kube_pod_container_resource_limits"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope := testScope()
			if tt.scope != nil {
				tt.scope(&scope)
			}
			f := &fakeQuerier{}
			tt.fake(f)
			got := measurer{cfg: tt.cfg, q: f}.measure(context.Background(), scope)
			f.allMatched(t)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d results %v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				checkResult(t, got[i], tt.want[i])
			}
			if len(f.got) != tt.queries {
				t.Errorf("sent %d queries %q, want %d", len(f.got), f.got, tt.queries)
			}
			for _, q := range f.got {
				for _, n := range tt.notSent {
					if strings.Contains(q, n) {
						t.Errorf("query %q holds %q", q, n)
					}
				}
			}
		})
	}
}

func TestParseCondition(t *testing.T) {
	tests := []struct {
		cond  string
		holds []float64
		fails []float64
	}{
		{"result < 0.5", []float64{0.49, -1}, []float64{0.5, 0.51}},
		{"result <= 0.5", []float64{0.5, 0}, []float64{0.5000001}},
		{"result > 1", []float64{1.01, 100}, []float64{1, 0}},
		{"result >= 1", []float64{1, 2}, []float64{0.99}},
		{"result == 1", []float64{1}, []float64{0.999, 1.001}},
		{"result != 0", []float64{1, -1}, []float64{0}},
		{"result >= 1 && result <= 10", []float64{1, 5, 10}, []float64{0.99, 10.01}},
		{"result > 0 && result < 1 && result != 0.5", []float64{0.25}, []float64{0.5, 0, 1}},
		{"  result   <   1e3  ", []float64{999}, []float64{1000}},
		{"result > -0.5", []float64{0}, []float64{-1}},
	}
	for _, tt := range tests {
		t.Run(tt.cond, func(t *testing.T) {
			f, err := parseCondition(tt.cond)
			if err != nil {
				t.Fatalf("parseCondition(%q): %v", tt.cond, err)
			}
			for _, v := range tt.holds {
				if !f(v) {
					t.Errorf("%q is false for %v", tt.cond, v)
				}
			}
			for _, v := range tt.fails {
				if f(v) {
					t.Errorf("%q is true for %v", tt.cond, v)
				}
			}
		})
	}

	invalid := []struct{ cond, want string }{
		{"", "condition is empty"},
		{"   ", "condition is empty"},
		{"result ~ 1", `unknown operator "~"`},
		{"result =< 1", `unknown operator "=<"`},
		{"result = 1", `unknown operator "="`},
		{"value < 1", "result OP NUMBER"},
		{"1 < result", "result OP NUMBER"},
		{"result <1", "result OP NUMBER"},
		{"result<1 && result>0", "result OP NUMBER"},
		{"result < 1 &&", "result OP NUMBER"},
		{"result < 1 || result > 2", "result OP NUMBER"},
		{"result < 1 2", "result OP NUMBER"},
		{"result < one", `"one" is not a number`},
		{"result > 1 && result < 1x", `"1x" is not a number`},
	}
	for _, tt := range invalid {
		t.Run("invalid "+tt.cond, func(t *testing.T) {
			f, err := parseCondition(tt.cond)
			if err == nil {
				t.Fatalf("parseCondition(%q) = %p, want an error", tt.cond, f)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestCheckResultString(t *testing.T) {
	tests := []struct {
		r    CheckResult
		want string
	}{
		{CheckResult{Check: "traffic", Verdict: Pass}, "traffic Pass"},
		{CheckResult{Check: "errorRate", Verdict: Fail, Value: fp(0.04), Stable: fp(0.01), Threshold: "max 0.05 ratio", Message: "too high"},
			"errorRate Fail: 0.04 (not yet updated: 0.01), max 0.05 ratio; too high"},
		{CheckResult{Check: "c", Verdict: Error, Message: "boom"}, "c Error; boom"},
		{CheckResult{Check: "l", Verdict: Pass, Value: fp(0.123456)}, "l Pass: 0.1235"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// promResponse is a recorded Prometheus HTTP API answer.
type promResponse struct {
	status int
	file   string // under testdata/prometheus; or body
	body   string
}

// fakePrometheus serves recorded answers by the query parameter and records what it got.
type fakePrometheus struct {
	t         *testing.T
	answers   map[string]promResponse
	mu        sync.Mutex
	requests  int
	auth      []string
	orgIDs    []string
	badPaths  []string
	unmatched []string
}

func (p *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	p.mu.Lock()
	p.requests++
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	p.orgIDs = append(p.orgIDs, r.Header.Get("X-Scope-OrgID"))
	if r.URL.Path != "/api/v1/query" {
		p.badPaths = append(p.badPaths, r.URL.Path)
	}
	a, ok := p.answers[q]
	if !ok {
		p.unmatched = append(p.unmatched, q)
	}
	p.mu.Unlock()
	if !ok {
		http.Error(w, "no recorded answer", http.StatusTeapot)
		return
	}
	body := []byte(a.body)
	if a.file != "" {
		var err error
		if body, err = os.ReadFile(filepath.Join("testdata", "prometheus", a.file)); err != nil {
			p.t.Errorf("recorded answer: %v", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(body)
}

const (
	testToken  = "s3cr3t-token"
	testTenant = "tenant-secret"
)

func TestClientQuery(t *testing.T) {
	fp := &fakePrometheus{t: t, answers: map[string]promResponse{
		"vector":       {status: 200, file: "vector.json"},
		"empty":        {status: 200, file: "vector_empty.json"},
		"scalar":       {status: 200, file: "scalar.json"},
		"nan":          {status: 200, file: "vector_nan.json"},
		"scalar nan":   {status: 200, file: "scalar_nan.json"},
		"matrix":       {status: 200, file: "matrix.json"},
		"by pod":       {status: 200, file: "vector_by_pod.json"},
		"unauthorized": {status: 401, body: "Unauthorized\n"},
		"forbidden":    {status: 403, body: "denied for this tenant\nsecond line"},
		"server error": {status: 500, body: "internal error\nstack trace line"},
		"unavailable":  {status: 503, body: "service unavailable"},
		"bad data":     {status: 400, file: "error_bad_data.json"},
		"timeout":      {status: 422, body: `{"status":"error","errorType":"execution","error":"query timed out in expression evaluation"}`},
		"not json":     {status: 200, body: "<html>proxy login</html>"},
	}}
	srv := httptest.NewServer(fp)
	defer srv.Close()

	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, testToken+"\n")
	c, err := NewClient(Prometheus{
		Address:         srv.URL,
		BearerTokenFile: tokenFile,
		Headers:         map[string]string{"X-Scope-OrgID": testTenant},
	}, "")
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}

	tests := []struct {
		query   string
		value   float64
		ok      bool
		wantErr []string // substrings of the error; nil for no error
	}{
		{query: "vector", value: 0.0425, ok: true},
		{query: "empty"},
		{query: "scalar", value: 42, ok: true},
		{query: "nan"},
		{query: "scalar nan"},
		{query: "matrix", wantErr: []string{srv.URL, "matrix", "want a vector or a scalar"}},
		{query: "by pod", wantErr: []string{srv.URL, "query returned 3 series where one value is needed", "sum()", "): by pod"}},
		{query: "unauthorized", wantErr: []string{srv.URL, "401", "Unauthorized"}},
		{query: "forbidden", wantErr: []string{srv.URL, "403", "denied for this tenant"}},
		{query: "server error", wantErr: []string{srv.URL, "500", "internal error"}},
		{query: "unavailable", wantErr: []string{srv.URL, "503"}},
		{query: "bad data", wantErr: []string{srv.URL, "bad_data", "parse error"}},
		{query: "timeout", wantErr: []string{srv.URL, "execution", "query timed out in expression evaluation"}},
		{query: "not json", wantErr: []string{srv.URL, "bad_response"}},
	}
	for i, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			v, ok, err := c.Query(context.Background(), tt.query)
			if got := c.Queries(); got != int64(i+1) {
				t.Errorf("Queries() = %d after %d queries", got, i+1)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Query(%q): %v", tt.query, err)
				}
				if ok != tt.ok || (tt.ok && v != tt.value) {
					t.Errorf("Query(%q) = %v, %v; want %v, %v", tt.query, v, ok, tt.value, tt.ok)
				}
				if !ok && v != 0 {
					t.Errorf("Query(%q) = %v without data; want 0", tt.query, v)
				}
				return
			}
			if err == nil {
				t.Fatalf("Query(%q) = %v, %v; want an error", tt.query, v, ok)
			}
			if ok {
				t.Errorf("Query(%q) returned ok with the error %v", tt.query, err)
			}
			msg := err.Error()
			for _, w := range tt.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, secret := range []string{testToken, testTenant} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q leaks %q", msg, secret)
				}
			}
			if strings.Contains(msg, "second line") || strings.Contains(msg, "stack trace line") {
				t.Errorf("error %q holds more than the first line of the body", msg)
			}
		})
	}

	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.requests < len(tests) {
		t.Errorf("server got %d requests for %d queries", fp.requests, len(tests))
	}
	for i, a := range fp.auth {
		if a != "Bearer "+testToken {
			t.Errorf("request %d: Authorization %q, want %q", i, a, "Bearer "+testToken)
		}
	}
	for i, o := range fp.orgIDs {
		if o != testTenant {
			t.Errorf("request %d: X-Scope-OrgID %q, want %q", i, o, testTenant)
		}
	}
	for _, p := range fp.badPaths {
		t.Errorf("request to %s, want /api/v1/query", p)
	}
	for _, q := range fp.unmatched {
		t.Errorf("unexpected query %q", q)
	}
}

func TestClientQuerySeries(t *testing.T) {
	srv := httptest.NewServer(&fakePrometheus{t: t, answers: map[string]promResponse{
		"vector":     {status: 200, file: "vector.json"},
		"by pod":     {status: 200, file: "vector_by_pod.json"},
		"by pod nan": {status: 200, file: "vector_by_pod_nan.json"},
		"empty":      {status: 200, file: "vector_empty.json"},
		"scalar":     {status: 200, file: "scalar.json"},
		"matrix":     {status: 200, file: "matrix.json"},
		"down":       {status: 503, body: "service unavailable"},
	}})
	defer srv.Close()
	c, err := NewClient(Prometheus{Address: srv.URL}, "")
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	pod := func(name string) map[string]string { return map[string]string{"pod": name} }
	tests := []struct {
		query   string
		want    []Series // in the order of the answer; NaN matches NaN
		wantErr string
	}{
		{query: "vector", want: []Series{{Labels: map[string]string{"namespace": "shop", "pod": "web-1"}, Value: 0.0425}}},
		{query: "by pod", want: []Series{{pod("web-2"), 0.3}, {pod("web-1"), 0.02}, {pod("web-3"), 0.01}}},
		{query: "by pod nan", want: []Series{{pod("web-1"), math.NaN()}, {pod("web-2"), 0.02}}},
		{query: "empty", want: []Series{}},
		{query: "scalar", want: []Series{{Value: 42}}},
		{query: "matrix", wantErr: "query returned a matrix; want a vector or a scalar"},
		{query: "down", wantErr: "HTTP 503"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got, err := c.QuerySeries(context.Background(), tt.query)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("QuerySeries(%q) = %v, %v; want an error containing %q", tt.query, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("QuerySeries(%q): %v", tt.query, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("QuerySeries(%q) = %v, want %v", tt.query, got, tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				sameValue := g.Value == w.Value || (math.IsNaN(g.Value) && math.IsNaN(w.Value))
				if !sameValue || fmt.Sprint(g.Labels) != fmt.Sprint(w.Labels) {
					t.Errorf("series %d = %v, want %v", i, g, w)
				}
			}
		})
	}
	if c.Queries() != int64(len(tests)) {
		t.Errorf("Queries() = %d, want %d", c.Queries(), len(tests))
	}
}

// TestEverySeries runs checks against recorded answers of several series, through Step and
// the client, as a rollout does.
func TestEverySeries(t *testing.T) {
	srv := httptest.NewServer(&fakePrometheus{t: t, answers: map[string]promResponse{
		"by pod":      {status: 200, file: "vector_by_pod.json"},
		"by pod nan":  {status: 200, file: "vector_by_pod_nan.json"},
		"up by pod":   {status: 200, file: "vector_by_pod_five.json"},
		"one labeled": {status: 200, file: "vector.json"},
		"nan":         {status: 200, file: "vector_nan.json"},
		"empty":       {status: 200, file: "vector_empty.json"},
		"scalar":      {status: 200, file: "scalar.json"},
	}})
	defer srv.Close()
	custom := func(query, condition string) Checks {
		return Checks{Custom: []Custom{{Name: "c", Query: query, Condition: condition}}}
	}
	tests := []struct {
		name   string
		checks Checks
		want   wantResult
	}{
		{
			name:   "every series satisfies the condition",
			checks: custom("by pod", "result < 0.5"),
			want:   wantResult{check: "c", verdict: Pass, threshold: "result < 0.5", message: "all 3 series satisfy result < 0.5", query: "by pod"},
		},
		{
			name:   "one failing series fails the check, however many pass",
			checks: custom("by pod", "result < 0.1"),
			want: wantResult{check: "c", verdict: Fail, threshold: "result < 0.1", value: fp(0.3),
				message: `result does not satisfy result < 0.1 on 1 of 3 series: {pod="web-2"} 0.3`},
		},
		{
			name:   "failing series are listed by their labels, the first three of them",
			checks: custom("up by pod", "result == 1"),
			want: wantResult{check: "c", verdict: Fail, threshold: "result == 1", value: fp(0),
				message: `on 5 of 5 series: up{pod="web-1"} 0, up{pod="web-2"} 0, up{pod="web-3"} 0, and 2 more`},
		},
		{
			name:   "a NaN series is not judged",
			checks: custom("by pod nan", "result < 0.1"),
			want:   wantResult{check: "c", verdict: Pass, threshold: "result < 0.1", value: fp(0.02)},
		},
		{
			name:   "a single labeled series that fails is named",
			checks: custom("one labeled", "result < 0.01"),
			want: wantResult{check: "c", verdict: Fail, threshold: "result < 0.01", value: fp(0.0425),
				message: `on 1 of 1 series: {namespace="shop", pod="web-1"} 0.0425`},
		},
		{
			name:   "a scalar is one value",
			checks: custom("scalar", "result > 40"),
			want:   wantResult{check: "c", verdict: Pass, threshold: "result > 40", value: fp(42)},
		},
		{
			name:   "only NaN is no data",
			checks: custom("nan", "result > 0"),
			want:   wantResult{check: "c", verdict: Inconclusive, threshold: "result > 0", message: "no data"},
		},
		{
			name:   "an empty vector is no data",
			checks: custom("empty", "result > 0"),
			want:   wantResult{check: "c", verdict: Inconclusive, threshold: "result > 0", message: "no data"},
		},
		{
			name:   "several series for a built-in check are an error",
			checks: Checks{ErrorRate: &ErrorRate{Query: "by pod"}},
			want: wantResult{check: CheckErrorRate, verdict: Error, threshold: thrErrorRate,
				message: "query returned 3 series where one value is needed (aggregate it to one series, e.g. with sum() or max()): by pod"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(Prometheus{Address: srv.URL}, "")
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			cfg := onlyChecks(tt.checks)
			cfg.InitialDelay = dp(0)
			a := &Analyzer{Config: cfg, Querier: c}
			r, _ := a.Step(context.Background(), NewRun(cfg, 0, t0), Scope{Namespace: "shop", Pods: []string{"web-1"}}, t0)
			if len(r.Last) != 1 || len(r.Last[0].Results) != 1 {
				t.Fatalf("measurements %+v, want one of one check", r.Last)
			}
			checkResult(t, r.Last[0].Results[0], tt.want)
			if r.Queries != 1 || c.Queries() != 1 {
				t.Errorf("the run counted %d queries and the client sent %d, want 1", r.Queries, c.Queries())
			}
		})
	}
}

func TestClientBasicAuthAndAddressOverride(t *testing.T) {
	fp := &fakePrometheus{t: t, answers: map[string]promResponse{
		"up":     {status: 200, file: "scalar.json"},
		"denied": {status: 401, body: "bad credentials"},
	}}
	srv := httptest.NewServer(fp)
	defer srv.Close()

	// The configured address is wrong; the argument overrides it.
	c, err := NewClient(Prometheus{Address: "http://127.0.0.1:1", BasicAuth: &BasicAuth{Username: "reader", Password: "hunter2"}}, srv.URL)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	if v, ok, err := c.Query(context.Background(), "up"); err != nil || !ok || v != 42 {
		t.Errorf("Query(up) = %v, %v, %v; want 42, true, nil", v, ok, err)
	}
	_, _, err = c.Query(context.Background(), "denied")
	if err == nil || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Query(denied) error = %v, want one naming %s and 401", err, srv.URL)
	}
	if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "aHVudGVyMg")) {
		t.Errorf("error %q leaks the password", err)
	}
	if c.Queries() != 2 {
		t.Errorf("Queries() = %d, want 2", c.Queries())
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("reader:hunter2"))
	for i, a := range fp.auth {
		if a != want {
			t.Errorf("request %d: Authorization %q, want %q", i, a, want)
		}
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	c, err := NewClient(Prometheus{Address: srv.URL, Timeout: Duration(50 * time.Millisecond)}, "")
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	_, ok, err := c.Query(context.Background(), "up")
	if err == nil || ok {
		t.Fatalf("Query against a server that never answers = %v, %v", ok, err)
	}
	for _, w := range []string{srv.URL, "no answer within 50ms"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestNewClientErrors(t *testing.T) {
	tests := []struct {
		name    string
		p       Prometheus
		address string
		want    string
	}{
		{"no address", Prometheus{}, "", "no Prometheus address"},
		{"a password in the address", Prometheus{Address: "http://reader:pw-secret@p:9090"}, "", "prometheus.basicAuth"},
		{"a password in the address override", Prometheus{Address: "http://p:9090"}, "http://reader:pw-secret@p:9090", `"http://xxxxx@p:9090" holds a user name or password`},
		{"an override that is no URL", Prometheus{}, "p:9090", `"p:9090" is not an http(s) URL`},
		{"both password and file", Prometheus{Address: "http://p", BasicAuth: &BasicAuth{Username: "u", Password: "pw-secret", PasswordFile: "/f"}}, "", "prometheus client settings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(tt.p, tt.address)
			if err == nil {
				t.Fatalf("NewClient = %v, want an error", c)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "pw-secret") {
				t.Errorf("error %q leaks the password", err)
			}
		})
	}
}

func TestClientCredentialsFromSecrets(t *testing.T) {
	ref := &SecretKeyRef{Name: "prom", Key: "k"}
	tests := []struct {
		name  string
		p     Prometheus
		creds Credentials
		want  string
	}{
		{"bearer token", Prometheus{BearerTokenSecret: ref}, Credentials{BearerToken: "tok-1"}, "Bearer tok-1"},
		{"basic auth password", Prometheus{BasicAuth: &BasicAuth{Username: "reader", PasswordSecret: ref}}, Credentials{Password: "pw-2"},
			"Basic " + base64.StdEncoding.EncodeToString([]byte("reader:pw-2"))},
		{"credentials of fields not set are not sent", Prometheus{}, Credentials{BearerToken: "tok-3"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := &fakePrometheus{t: t, answers: map[string]promResponse{"up": {status: 200, file: "scalar.json"}}}
			srv := httptest.NewServer(fp)
			defer srv.Close()
			tt.p.Address = srv.URL
			c, err := NewClientWith(tt.p, "", tt.creds)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Query(context.Background(), "up"); err != nil {
				t.Fatal(err)
			}
			fp.mu.Lock()
			defer fp.mu.Unlock()
			if len(fp.auth) != 1 || fp.auth[0] != tt.want {
				t.Errorf("Authorization %q, want %q", fp.auth, tt.want)
			}
		})
	}
}
