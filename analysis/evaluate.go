package analysis

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
)

// Verdict is the outcome of a check measurement or of a batch's analysis.
type Verdict string

// Verdicts. Skipped is a check with nothing to measure (saturation without limits); it never
// decides an analysis.
const (
	Pass         Verdict = "Pass"
	Fail         Verdict = "Fail"
	Inconclusive Verdict = "Inconclusive"
	Error        Verdict = "Error"
	Skipped      Verdict = "Skipped"
)

// CheckResult is one check in one measurement, with the numbers that produced its verdict.
type CheckResult struct {
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	// Value is the updated pods' measurement; Stable the not-yet-updated pods', when compared.
	Value  *float64 `json:"value,omitempty"`
	Stable *float64 `json:"stable,omitempty"`
	// Threshold is the bound the check is judged against, on every verdict: a reader of an
	// Error or Inconclusive result still learns what would have passed.
	Threshold string `json:"threshold,omitempty"`
	// Query is the updated pods' query with its pod lists left as {{.Pods}} and
	// {{.StablePods}}, and QueryHash a hash of the query as sent: a result stays the same size
	// however many pods a batch has.
	Query     string `json:"query,omitempty"`
	QueryHash string `json:"queryHash,omitempty"`
	// Message says why, in at most maxMessage bytes.
	Message string `json:"message,omitempty"`
}

func (r CheckResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Check, r.Verdict)
	if r.Value != nil {
		fmt.Fprintf(&b, ": %.4g", *r.Value)
		if r.Stable != nil {
			fmt.Fprintf(&b, " (not yet updated: %.4g)", *r.Stable)
		}
	}
	if r.Threshold != "" {
		fmt.Fprintf(&b, ", %s", r.Threshold)
	}
	if r.Message != "" {
		fmt.Fprintf(&b, "; %s", r.Message)
	}
	return b.String()
}

// measurer evaluates the configured checks against Prometheus.
type measurer struct {
	cfg *Config
	q   Querier
}

// measure runs every enabled check once for the scope.
func (m measurer) measure(ctx context.Context, s Scope) []CheckResult {
	c := m.cfg.Checks
	var out []CheckResult
	if c.ErrorRate == nil || !c.ErrorRate.Disabled {
		er := c.ErrorRate
		if er == nil {
			er = &ErrorRate{}
		}
		out = append(out, m.compared(ctx, s, CheckErrorRate, or(er.Query, errorRateQuery),
			orFloat(er.MaxRatio, 0.05), orFloat(er.MaxIncrease, 0.02), "ratio"))
	}
	if c.Latency == nil || !c.Latency.Disabled {
		l := c.Latency
		if l == nil {
			l = &Latency{}
		}
		q := or(l.Query, fmt.Sprintf(latencyQuery, orFloat(l.Quantile, 0.99)))
		out = append(out, m.compared(ctx, s, CheckLatency, q, orFloat(l.Max, 1), orFloat(l.MaxIncrease, 0.25), "s"))
	}
	if c.Traffic == nil || !c.Traffic.Disabled {
		t := c.Traffic
		if t == nil {
			t = &Traffic{}
		}
		out = append(out, m.traffic(ctx, s, or(t.Query, trafficQuery), orFloat(t.MinRate, 1)))
	}
	if c.Saturation == nil || !c.Saturation.Disabled {
		sat := c.Saturation
		if sat == nil {
			sat = &Saturation{}
		}
		out = append(out, m.saturation(ctx, s, sat))
	}
	for _, cu := range c.Custom {
		out = append(out, m.custom(ctx, s, cu))
	}
	return out
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// value renders and runs a query. It returns a result carrying the query, and the verdict that
// ends the check early: Error on a failed query, Inconclusive on no data.
func (m measurer) value(ctx context.Context, check, text string, s Scope) (CheckResult, float64, bool) {
	r := CheckResult{Check: check}
	q, err := render(check, text, s)
	if err != nil {
		r.Verdict, r.Message = Error, err.Error()
		return r, 0, false
	}
	r.Query, r.QueryHash = renderShown(check, text, s), queryHash(q)
	v, ok, err := m.q.Query(ctx, q)
	switch {
	case err != nil:
		r.Verdict, r.Message = Error, withoutPods(err.Error(), q, r.Query, s)
		return r, 0, false
	case !ok:
		r.Verdict, r.Message = Inconclusive, "no data (empty result or NaN)"
		return r, 0, false
	}
	return r, v, true
}

// compared checks the updated pods' value against an absolute bound and, when pods remain on
// the old images, against theirs. Limits trip when strictly exceeded.
func (m measurer) compared(ctx context.Context, s Scope, check, query string, max, maxIncrease float64, unit string) CheckResult {
	r, v, ok := m.value(ctx, check, query, s)
	// Set before any early return: every verdict says what it was judged against.
	r.Threshold = fmt.Sprintf("max %g %s, max %g %s over the pods not yet updated", max, unit, maxIncrease, unit)
	if !ok {
		return r
	}
	r.Value = &v
	if v > max {
		r.Verdict, r.Message = Fail, fmt.Sprintf("%.4g %s is above the maximum %g", v, unit, max)
		return r
	}
	if len(s.StablePods) > 0 {
		stable := s
		stable.Pods, stable.StablePods = s.StablePods, nil
		sr, sv, sok := m.value(ctx, check, query, stable)
		switch {
		case sr.Verdict == Error:
			r.Verdict, r.Message = Error, "pods not yet updated: "+sr.Message
			return r
		case sok:
			r.Stable = &sv
			if v-sv > maxIncrease {
				r.Verdict, r.Message = Fail, fmt.Sprintf("%.4g %s is %.4g above the pods not yet updated (%.4g); at most %g allowed", v, unit, v-sv, sv, maxIncrease)
				return r
			}
		}
	}
	r.Verdict = Pass
	return r
}

func (m measurer) traffic(ctx context.Context, s Scope, query string, minRate float64) CheckResult {
	r, v, ok := m.value(ctx, CheckTraffic, query, s)
	r.Threshold = fmt.Sprintf("min %g req/s", minRate)
	if !ok {
		if r.Verdict == Inconclusive {
			r.Message = "no traffic measured: " + r.Message
		}
		return r
	}
	r.Value = &v
	if v < minRate {
		r.Verdict, r.Message = Inconclusive, fmt.Sprintf("%.4g req/s is below the %g req/s a verdict needs", v, minRate)
		return r
	}
	r.Verdict = Pass
	return r
}

func (m measurer) saturation(ctx context.Context, s Scope, sat *Saturation) CheckResult {
	parts := []struct {
		name, query string
		max         float64
	}{
		{"cpu", or(sat.CPUQuery, cpuQuery), orFloat(sat.MaxCPU, 0.9)},
		{"memory", or(sat.MemoryQuery, memoryQuery), orFloat(sat.MaxMemory, 0.9)},
	}
	threshold := func(name string, max float64) string { return fmt.Sprintf("%s at most %g of the limit", name, max) }
	// Results that no single resource decided carry both bounds.
	both := threshold(parts[0].name, parts[0].max) + ", " + threshold(parts[1].name, parts[1].max)
	lr, n, ok := m.value(ctx, CheckSaturation, limitsQuery, s)
	lr.Threshold = both
	if lr.Verdict == Error {
		return lr
	}
	if !ok || n == 0 {
		return CheckResult{Check: CheckSaturation, Verdict: Skipped, Threshold: both, Query: lr.Query, Message: "the pods set no CPU or memory limits to compare with"}
	}
	worst := CheckResult{Check: CheckSaturation, Verdict: Pass}
	for _, part := range parts {
		r, v, ok := m.value(ctx, CheckSaturation, part.query, s)
		r.Threshold = threshold(part.name, part.max)
		switch {
		case !ok && r.Verdict == Inconclusive:
			// A limit set on one resource only: the other has nothing to compare with.
			continue
		case !ok:
			return r
		}
		r.Value = &v
		r.Verdict = Pass
		if v > part.max {
			r.Verdict, r.Message = Fail, fmt.Sprintf("%s at %.3g of the limit, above %g", part.name, v, part.max)
			return r
		}
		if worst.Value == nil || v > *worst.Value {
			worst = r
		}
	}
	if worst.Value == nil {
		return CheckResult{Check: CheckSaturation, Verdict: Inconclusive, Threshold: both, Query: lr.Query, Message: "limits are set but no usage was measured"}
	}
	return worst
}

// custom judges a custom check on every series of its query's result, unlike the built-in
// checks, whose queries aggregate to one series: a query by pod fails when any pod fails, so a
// bad pod cannot hide behind a good one. A NaN series has no data and is not judged; when no
// series is left the check is Inconclusive.
func (m measurer) custom(ctx context.Context, s Scope, c Custom) CheckResult {
	r := CheckResult{Check: c.Name, Threshold: c.Condition}
	q, err := render(c.Name, c.Query, s)
	if err != nil {
		r.Verdict, r.Message = Error, err.Error()
		return r
	}
	r.Query, r.QueryHash = renderShown(c.Name, c.Query, s), queryHash(q)
	all, err := querySeries(ctx, m.q, q)
	if err != nil {
		r.Verdict, r.Message = Error, withoutPods(err.Error(), q, r.Query, s)
		return r
	}
	var measured []Series
	for _, se := range all {
		if !math.IsNaN(se.Value) {
			measured = append(measured, se)
		}
	}
	if len(measured) == 0 {
		r.Verdict, r.Message = Inconclusive, "no data (empty result or NaN)"
		return r
	}
	sort.Slice(measured, func(i, j int) bool { return labelString(measured[i].Labels) < labelString(measured[j].Labels) })
	cond, _ := parseCondition(c.Condition) // validated with the config
	var failed []Series
	for _, se := range measured {
		if !cond(se.Value) {
			failed = append(failed, se)
		}
	}
	switch {
	case len(failed) == 0:
		r.Verdict = Pass
		if len(measured) == 1 {
			r.Value = &measured[0].Value
		} else {
			r.Message = fmt.Sprintf("all %d series satisfy %s", len(measured), c.Condition)
		}
	case len(measured) == 1 && len(measured[0].Labels) == 0:
		r.Verdict, r.Value = Fail, &failed[0].Value
		r.Message = fmt.Sprintf("result %.4g does not satisfy %s", failed[0].Value, c.Condition)
	default:
		r.Verdict, r.Value = Fail, &failed[0].Value
		// A few series say which ones; all of them could outgrow the lock annotation.
		const shown = 3
		var list []string
		for _, se := range failed[:min(len(failed), shown)] {
			list = append(list, fmt.Sprintf("%s %.4g", labelString(se.Labels), se.Value))
		}
		if len(failed) > shown {
			list = append(list, fmt.Sprintf("and %d more", len(failed)-shown))
		}
		r.Message = fmt.Sprintf("result does not satisfy %s on %d of %d series: %s", c.Condition, len(failed), len(measured), strings.Join(list, ", "))
	}
	return r
}

// labelString writes labels as PromQL does, name first: up{pod="web-1"}.
func labelString(labels map[string]string) string {
	m := make(model.Metric, len(labels))
	for k, v := range labels {
		m[model.LabelName(k)] = model.LabelValue(v)
	}
	return m.String()
}

// querySeries returns every series of the query's result from a SeriesQuerier, or else the
// one value of Query as a series without labels.
func querySeries(ctx context.Context, q Querier, query string) ([]Series, error) {
	if sq, ok := q.(SeriesQuerier); ok {
		return sq.QuerySeries(ctx, query)
	}
	v, ok, err := q.Query(ctx, query)
	if err != nil || !ok {
		return nil, err
	}
	return []Series{{Value: v}}, nil
}

// parseCondition parses comparisons of result with numbers joined by &&, e.g.
// "result < 0.5" or "result >= 1 && result <= 10".
func parseCondition(s string) (func(float64) bool, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("condition is empty; write e.g. \"result < 0.5\"")
	}
	var tests []func(float64) bool
	for _, part := range strings.Split(s, "&&") {
		f := strings.Fields(part)
		if len(f) != 3 || f[0] != "result" {
			return nil, fmt.Errorf("condition %q: each part must read \"result OP NUMBER\" with OP one of < <= > >= == !=", s)
		}
		n, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("condition %q: %q is not a number", s, f[2])
		}
		var t func(float64) bool
		switch f[1] {
		case "<":
			t = func(v float64) bool { return v < n }
		case "<=":
			t = func(v float64) bool { return v <= n }
		case ">":
			t = func(v float64) bool { return v > n }
		case ">=":
			t = func(v float64) bool { return v >= n }
		case "==":
			t = func(v float64) bool { return v == n }
		case "!=":
			t = func(v float64) bool { return v != n }
		default:
			return nil, fmt.Errorf("condition %q: unknown operator %q", s, f[1])
		}
		tests = append(tests, t)
	}
	return func(v float64) bool {
		for _, t := range tests {
			if !t(v) {
				return false
			}
		}
		return true
	}, nil
}

// withoutPods takes the pod lists out of an error about query q, which Prometheus and the client
// often quote: the query as sent becomes the query as results show it, and a pod list left
// becomes its placeholder, so that a message stays the same size however many pods there are.
func withoutPods(msg, q, shown string, s Scope) string {
	msg = strings.ReplaceAll(msg, q, shown)
	for _, l := range []struct {
		pods        []string
		placeholder string
	}{{s.Pods, "{{.Pods}}"}, {s.StablePods, "{{.StablePods}}"}} {
		if len(l.pods) > 0 {
			msg = strings.ReplaceAll(msg, podRegex(l.pods), l.placeholder)
		}
	}
	return msg
}
