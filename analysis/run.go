package analysis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// keepMeasurements bounds the measurements a run keeps, whatever its count.
const keepMeasurements = 3

// Measurement is one round of every check.
type Measurement struct {
	At      time.Time     `json:"at"`
	Results []CheckResult `json:"results"`
}

// Counts are a check's measurements so far, as Argo Rollouts counts a metric's: Error
// measurements do not count towards Measured.
type Counts struct {
	Measured          int `json:"measured"`
	Failed            int `json:"failed"`
	Inconclusive      int `json:"inconclusive"`
	Errors            int `json:"errors"`
	ConsecutiveErrors int `json:"consecutiveErrors"`
}

// Run is the state of one batch's analysis. It is small, kept on the workload's lock, so a
// restarted driver continues the same analysis.
type Run struct {
	// Batch is the batch measured, counting from 1 as every message and status does.
	Batch int `json:"batch"`
	// Pods is the updated pod count the batch ends at: what the run's verdict accepts.
	Pods      int                `json:"pods,omitempty"`
	StartedAt time.Time          `json:"startedAt"`
	NextAt    time.Time          `json:"nextAt"`
	Counts    map[string]*Counts `json:"counts,omitempty"`
	// Last holds the most recent measurements, at most keepMeasurements.
	Last    []Measurement `json:"last,omitempty"`
	Verdict Verdict       `json:"verdict,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	// Queries counts the PromQL queries the run sent.
	Queries int `json:"queries"`
}

// Shown is the run's verdict as a status shows it: Running until the run has one.
func (r *Run) Shown() string {
	if r.Verdict == "" {
		return "Running"
	}
	return string(r.Verdict)
}

// NewRun starts the analysis of a batch; the first measurement is due after the initial delay.
func NewRun(cfg *Config, batch int, now time.Time) *Run {
	now = now.UTC().Truncate(time.Millisecond)
	return &Run{Batch: batch, StartedAt: now, NextAt: now.Add(cfg.initialDelay()), Counts: map[string]*Counts{}}
}

// Done reports whether the run reached a verdict.
func (r *Run) Done() bool { return r.Verdict != "" }

// Analyzer measures batches against Prometheus.
type Analyzer struct {
	Config  *Config
	Querier Querier
}

// Step takes the measurement that is due, if any, and returns the run updated, with its
// verdict once a check trips a limit or every check has been measured Count times. It returns
// r unchanged, and when to call again, while no measurement is due.
func (a *Analyzer) Step(ctx context.Context, r *Run, scope Scope, now time.Time) (*Run, time.Duration) {
	if r.Done() {
		return r, 0
	}
	if wait := r.NextAt.Sub(now); wait > 0 {
		return r, wait
	}
	next := *r
	next.Counts = map[string]*Counts{}
	for k, v := range r.Counts {
		c := *v
		next.Counts[k] = &c
	}
	if scope.Window == 0 {
		scope.Window = a.Config.window()
	}
	counter := &countingQuerier{q: a.Querier}
	results := measurer{cfg: a.Config, q: counter}.measure(ctx, scope)
	for i := range results {
		// An error can quote the query it ran, pod lists and all.
		results[i].Message = clip(results[i].Message, maxMessage)
	}
	next.Queries += counter.n
	next.Last = append(append([]Measurement(nil), r.Last...), Measurement{At: now.UTC().Truncate(time.Millisecond), Results: results})
	if len(next.Last) > keepMeasurements {
		next.Last = next.Last[len(next.Last)-keepMeasurements:]
	}
	for _, res := range results {
		c := next.Counts[res.Check]
		if c == nil {
			c = &Counts{}
			next.Counts[res.Check] = c
		}
		switch res.Verdict {
		case Error:
			c.Errors++
			c.ConsecutiveErrors++
			continue
		case Skipped:
			continue
		case Fail:
			c.Failed++
		case Inconclusive:
			c.Inconclusive++
		}
		c.Measured++
		c.ConsecutiveErrors = 0
	}
	next.Verdict, next.Reason = a.assess(&next, results)
	next.NextAt = now.Add(a.Config.interval())
	if next.Done() {
		return &next, 0
	}
	return &next, a.Config.interval()
}

// assess applies the limits as Argo Rollouts does: for one check, Error over its limit beats
// Inconclusive, which beats Fail; across checks the worst wins (Fail, then Error, then
// Inconclusive). Once every measured check reached Count without tripping a limit: Pass, but
// only if every measured check passed at least once. Argo would pass a metric whose every
// measurement was Inconclusive within inconclusiveLimit; here that is Inconclusive, so that a
// batch nobody sent traffic to is never judged good.
func (a *Analyzer) assess(r *Run, latest []CheckResult) (Verdict, string) {
	failureLimit, inconclusiveLimit, errorLimit := a.Config.limits()
	rank := map[Verdict]int{Inconclusive: 1, Error: 2, Fail: 3}
	var worst Verdict
	var reasons []string
	names := make([]string, 0, len(r.Counts))
	for name := range r.Counts {
		names = append(names, name)
	}
	sort.Strings(names)
	allCounted := len(names) > 0
	measuredChecks := 0
	var neverPassed []string
	for _, name := range names {
		c := r.Counts[name]
		var v Verdict
		if c.Failed > failureLimit {
			v = Fail
		}
		if c.Inconclusive > inconclusiveLimit {
			v = Inconclusive
		}
		if c.ConsecutiveErrors > errorLimit {
			v = Error
		}
		if v != "" {
			reasons = append(reasons, fmt.Sprintf("%s %s (%s)", name, v, lastResult(latest, name)))
			if rank[v] > rank[worst] {
				worst = v
			}
		}
		skipped := c.Measured == 0 && c.Errors == 0
		if !skipped {
			measuredChecks++
			if c.Measured-c.Failed-c.Inconclusive == 0 {
				neverPassed = append(neverPassed, fmt.Sprintf("%s never passed (%s)", name, lastResult(latest, name)))
			}
		}
		if !skipped && c.Measured < a.Config.count() {
			allCounted = false
		}
	}
	if worst != "" {
		return worst, strings.Join(reasons, "; ")
	}
	if allCounted && measuredChecks == 0 {
		return Inconclusive, "every check was skipped: nothing was measured"
	}
	if allCounted && len(neverPassed) > 0 {
		return Inconclusive, strings.Join(neverPassed, "; ")
	}
	if allCounted {
		return Pass, fmt.Sprintf("%d measurements passed", a.Config.count())
	}
	return "", ""
}

func lastResult(results []CheckResult, check string) string {
	for _, r := range results {
		if r.Check == check {
			return r.String()
		}
	}
	return "no measurement"
}

// countingQuerier counts the queries of one step.
type countingQuerier struct {
	q Querier
	n int
}

func (c *countingQuerier) Query(ctx context.Context, q string) (float64, bool, error) {
	c.n++
	return c.q.Query(ctx, q)
}

// QuerySeries keeps the series of a SeriesQuerier visible through the count.
func (c *countingQuerier) QuerySeries(ctx context.Context, q string) ([]Series, error) {
	c.n++
	return querySeries(ctx, c.q, q)
}

// maxMessage bounds a result's message, so that the state on the lock stays small.
const maxMessage = 300

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
