package analysis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// Answers of a custom check with the condition "result < 1".
var (
	pass         = value(0)
	fail         = value(5)
	inconclusive = noData
	erroring     = queryError("prometheus at http://prom:9090: connection refused")
)

// customConfig is a configuration with every built-in check disabled and one custom check per
// name, querying the name and passing on values below 1.
func customConfig(names ...string) *Config {
	var cs []Custom
	for _, n := range names {
		cs = append(cs, Custom{Name: n, Query: n, Condition: "result < 1"})
	}
	return onlyChecks(Checks{Custom: cs})
}

func dp(d time.Duration) *Duration { v := Duration(d); return &v }

func TestNewRunAndDone(t *testing.T) {
	cfg := &Config{InitialDelay: dp(45 * time.Second)}
	now := time.Date(2025, 3, 4, 5, 6, 7, 891234567, time.FixedZone("CET", 3600))
	r := NewRun(cfg, 2, now)
	wantStart := time.Date(2025, 3, 4, 4, 6, 7, 891000000, time.UTC)
	if !r.StartedAt.Equal(wantStart) || r.StartedAt.Location() != time.UTC {
		t.Errorf("StartedAt = %v, want %v", r.StartedAt, wantStart)
	}
	if want := wantStart.Add(45 * time.Second); !r.NextAt.Equal(want) {
		t.Errorf("NextAt = %v, want %v", r.NextAt, want)
	}
	if r.Batch != 2 || r.Counts == nil || len(r.Counts) != 0 || r.Last != nil || r.Queries != 0 || r.Verdict != "" {
		t.Errorf("NewRun = %+v", r)
	}
	if r.Done() {
		t.Error("a new run is done")
	}
	for _, tt := range []struct {
		cfg  *Config
		want time.Duration
	}{
		{&Config{}, DefaultWindow}, // by default, a window after the start
		{&Config{Window: Duration(3 * time.Minute)}, 3 * time.Minute},
		{&Config{Window: Duration(3 * time.Minute), InitialDelay: dp(0)}, 0},
		{&Config{InitialDelay: dp(10 * time.Second)}, 10 * time.Second},
	} {
		if r := NewRun(tt.cfg, 0, t0); !r.NextAt.Equal(t0.Add(tt.want)) {
			t.Errorf("window %v, initial delay %v: NextAt = %v, want %v", time.Duration(tt.cfg.Window), tt.cfg.InitialDelay, r.NextAt, t0.Add(tt.want))
		}
	}
	for _, v := range []Verdict{Pass, Fail, Inconclusive, Error} {
		if !(&Run{Verdict: v}).Done() {
			t.Errorf("a run with the verdict %s is not done", v)
		}
	}
}

func TestStepTiming(t *testing.T) {
	cfg := customConfig("a")
	cfg.InitialDelay = dp(30 * time.Second)
	cfg.Interval = Duration(20 * time.Second)
	cfg.Count = 5
	f := (&fakeQuerier{}).exact("a", pass)
	a := &Analyzer{Config: cfg, Querier: f}
	ctx := context.Background()

	r0 := NewRun(cfg, 1, t0)
	got, wait := a.Step(ctx, r0, Scope{}, t0.Add(10*time.Second))
	if got != r0 || wait != 20*time.Second {
		t.Errorf("Step during the initial delay = %p, %v; want %p, 20s", got, wait, r0)
	}
	if len(f.got) != 0 {
		t.Errorf("queries sent during the initial delay: %q", f.got)
	}

	// Called late: the next measurement is an interval after this one.
	late := t0.Add(31 * time.Second)
	r1, wait := a.Step(ctx, r0, Scope{}, late)
	if r1 == r0 {
		t.Fatal("a due Step returned the same run")
	}
	if wait != 20*time.Second || !r1.NextAt.Equal(late.Add(20*time.Second)) {
		t.Errorf("after a measurement: wait %v, NextAt %v; want 20s, %v", wait, r1.NextAt, late.Add(20*time.Second))
	}
	if len(r1.Last) != 1 || !r1.Last[0].At.Equal(late) || r1.Queries != 1 || r1.Counts["a"].Measured != 1 {
		t.Errorf("after a measurement: %+v", r1)
	}
	// r0 is left as it was.
	if len(r0.Counts) != 0 || r0.Last != nil || r0.Queries != 0 || !r0.NextAt.Equal(t0.Add(30*time.Second)) {
		t.Errorf("Step changed the run it was given: %+v", r0)
	}

	got, wait = a.Step(ctx, r1, Scope{}, late.Add(5*time.Second))
	if got != r1 || wait != 15*time.Second {
		t.Errorf("Step before NextAt = %p, %v; want %p, 15s", got, wait, r1)
	}
	if len(f.got) != 1 {
		t.Errorf("sent %d queries, want 1", len(f.got))
	}
}

func TestStepWindow(t *testing.T) {
	cfg := onlyChecks(Checks{Custom: []Custom{{Name: "w", Query: "rate(x[{{.Window}}])", Condition: "result < 1"}}})
	f := (&fakeQuerier{}).exact("rate(x[1m])", pass).exact("rate(x[2m])", pass).exact("rate(x[30s])", pass)
	a := &Analyzer{Config: cfg, Querier: f}
	due := func() (*Run, time.Time) { r := NewRun(cfg, 0, t0); return r, r.NextAt }
	r, at := due()
	a.Step(context.Background(), r, Scope{}, at)
	cfg.Window = Duration(2 * time.Minute)
	r, at = due()
	a.Step(context.Background(), r, Scope{}, at)
	r, at = due()
	a.Step(context.Background(), r, Scope{Window: 30 * time.Second}, at)
	f.allMatched(t)
	want := []string{"rate(x[1m])", "rate(x[2m])", "rate(x[30s])"}
	if fmt.Sprint(f.got) != fmt.Sprint(want) {
		t.Errorf("queries %q, want %q", f.got, want)
	}
}

func TestStepLimits(t *testing.T) {
	type check struct {
		name    string
		answers []answer
	}
	tests := []struct {
		name   string
		cfg    func(c *Config)
		checks []check
		// verdicts is the verdict after each step, "" while undecided; the last one decides.
		verdicts []Verdict
		reason   []string // substrings of the final reason
	}{
		{
			name:     "count measurements all passing pass after exactly Count steps",
			cfg:      func(c *Config) { c.Count = 4 },
			checks:   []check{{"a", []answer{pass}}, {"b", []answer{pass}}},
			verdicts: []Verdict{"", "", "", Pass},
			reason:   []string{"4 measurements passed"},
		},
		{
			name:     "the default count is 3",
			checks:   []check{{"a", []answer{pass}}},
			verdicts: []Verdict{"", "", Pass},
		},
		{
			name:     "count 1",
			cfg:      func(c *Config) { c.Count = 1 },
			checks:   []check{{"a", []answer{pass}}},
			verdicts: []Verdict{Pass},
		},
		{
			name:     "failureLimit 0 fails on the first failing measurement",
			cfg:      func(c *Config) { c.Count = 5 },
			checks:   []check{{"a", []answer{pass, fail}}},
			verdicts: []Verdict{"", Fail},
			reason:   []string{"a Fail", "does not satisfy result < 1"},
		},
		{
			name:     "failureLimit 0 fails on the last measurement too",
			cfg:      func(c *Config) { c.Count = 3 },
			checks:   []check{{"a", []answer{pass, pass, fail}}},
			verdicts: []Verdict{"", "", Fail},
		},
		{
			name:     "failureLimit 1 needs two failures",
			cfg:      func(c *Config) { c.Count = 5; c.FailureLimit = ip(1) },
			checks:   []check{{"a", []answer{fail, pass, fail}}},
			verdicts: []Verdict{"", "", Fail},
		},
		{
			name:     "failureLimit 1 tolerates one failure",
			cfg:      func(c *Config) { c.Count = 3; c.FailureLimit = ip(1) },
			checks:   []check{{"a", []answer{fail, pass}}},
			verdicts: []Verdict{"", "", Pass},
		},
		{
			name:     "inconclusiveLimit 0 is inconclusive on the first inconclusive measurement",
			cfg:      func(c *Config) { c.Count = 5 },
			checks:   []check{{"a", []answer{inconclusive}}},
			verdicts: []Verdict{Inconclusive},
			reason:   []string{"a Inconclusive", "no data"},
		},
		{
			name:     "inconclusiveLimit 2 needs three",
			cfg:      func(c *Config) { c.Count = 9; c.InconclusiveLimit = ip(2) },
			checks:   []check{{"a", []answer{inconclusive, pass, inconclusive, pass, inconclusive}}},
			verdicts: []Verdict{"", "", "", "", Inconclusive},
		},
		{
			name:     "inconclusive measurements within the limit count towards Count",
			cfg:      func(c *Config) { c.Count = 3; c.InconclusiveLimit = ip(1) },
			checks:   []check{{"a", []answer{inconclusive, pass}}},
			verdicts: []Verdict{"", "", Pass},
		},
		{
			name:     "a check that never passed is inconclusive even within the limits",
			cfg:      func(c *Config) { c.Count = 3; c.InconclusiveLimit = ip(3) },
			checks:   []check{{"a", []answer{pass}}, {"traffic", []answer{inconclusive}}},
			verdicts: []Verdict{"", "", Inconclusive},
			reason:   []string{"traffic never passed", "no data"},
		},
		{
			name:     "a check that only failed within its limit never passed",
			cfg:      func(c *Config) { c.Count = 2; c.FailureLimit = ip(2) },
			checks:   []check{{"a", []answer{fail}}},
			verdicts: []Verdict{"", Inconclusive},
			reason:   []string{"a never passed"},
		},
		{
			name:     "the default consecutiveErrorLimit 4 errors on the fifth consecutive error, never passing",
			cfg:      func(c *Config) { c.Count = 1 },
			checks:   []check{{"a", []answer{erroring}}},
			verdicts: []Verdict{"", "", "", "", Error},
			reason:   []string{"a Error", "connection refused"},
		},
		{
			name:     "errors do not count towards Count",
			cfg:      func(c *Config) { c.Count = 2 },
			checks:   []check{{"a", []answer{erroring, pass, erroring, erroring, pass}}},
			verdicts: []Verdict{"", "", "", "", Pass},
		},
		{
			name:     "a success resets the consecutive errors",
			cfg:      func(c *Config) { c.Count = 10 },
			checks:   []check{{"a", []answer{erroring, erroring, erroring, erroring, pass, erroring}}},
			verdicts: []Verdict{"", "", "", "", "", "", "", "", "", Error},
		},
		{
			name:     "an inconclusive measurement resets the consecutive errors",
			cfg:      func(c *Config) { c.Count = 10; c.InconclusiveLimit = ip(5); c.ConsecutiveErrorLimit = ip(1) },
			checks:   []check{{"a", []answer{erroring, inconclusive, erroring, inconclusive, erroring, erroring}}},
			verdicts: []Verdict{"", "", "", "", "", Error},
		},
		{
			name:     "consecutiveErrorLimit 0 errors on the first error",
			cfg:      func(c *Config) { c.ConsecutiveErrorLimit = ip(0) },
			checks:   []check{{"a", []answer{erroring}}},
			verdicts: []Verdict{Error},
		},
		{
			name:     "consecutiveErrorLimit 2",
			cfg:      func(c *Config) { c.ConsecutiveErrorLimit = ip(2); c.Count = 1 },
			checks:   []check{{"a", []answer{erroring}}},
			verdicts: []Verdict{"", "", Error},
		},
		{
			name: "across checks Fail beats Error and Inconclusive",
			cfg:  func(c *Config) { c.ConsecutiveErrorLimit = ip(0) },
			checks: []check{
				{"c", []answer{inconclusive}}, {"b", []answer{erroring}}, {"a", []answer{fail}}, {"d", []answer{pass}},
			},
			verdicts: []Verdict{Fail},
			reason:   []string{"a Fail", "b Error", "c Inconclusive"},
		},
		{
			name:     "across checks Error beats Inconclusive",
			cfg:      func(c *Config) { c.ConsecutiveErrorLimit = ip(0) },
			checks:   []check{{"a", []answer{inconclusive}}, {"b", []answer{erroring}}, {"c", []answer{pass}}},
			verdicts: []Verdict{Error},
			reason:   []string{"a Inconclusive", "b Error"},
		},
		{
			name:     "a check over its limit decides while another passes",
			cfg:      func(c *Config) { c.Count = 2 },
			checks:   []check{{"a", []answer{pass}}, {"b", []answer{pass, inconclusive}}},
			verdicts: []Verdict{"", Inconclusive},
			reason:   []string{"b Inconclusive"},
		},
		{
			name:     "a check still measuring holds back the pass",
			cfg:      func(c *Config) { c.Count = 2 },
			checks:   []check{{"a", []answer{pass}}, {"b", []answer{erroring, pass}}},
			verdicts: []Verdict{"", "", Pass},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			f := &fakeQuerier{}
			for _, c := range tt.checks {
				names = append(names, c.name)
				f.exact(c.name, c.answers...)
			}
			cfg := customConfig(names...)
			cfg.Interval = Duration(15 * time.Second)
			if tt.cfg != nil {
				tt.cfg(cfg)
			}
			a := &Analyzer{Config: cfg, Querier: f}
			r := NewRun(cfg, 0, t0)
			for i, want := range tt.verdicts {
				prev := r
				var wait time.Duration
				r, wait = a.Step(context.Background(), r, Scope{Pods: []string{"p"}}, r.NextAt)
				if r == prev {
					t.Fatalf("step %d: no measurement taken", i+1)
				}
				if r.Verdict != want {
					t.Fatalf("step %d: verdict %q (%s), want %q; counts %s", i+1, r.Verdict, r.Reason, want, countsString(r))
				}
				if want == "" && (r.Reason != "" || wait != 15*time.Second) {
					t.Errorf("step %d: undecided run with reason %q and wait %v", i+1, r.Reason, wait)
				}
				if want != "" && wait != 0 {
					t.Errorf("step %d: decided run with wait %v, want 0", i+1, wait)
				}
			}
			f.allMatched(t)
			if !r.Done() {
				t.Fatalf("no verdict after %d steps", len(tt.verdicts))
			}
			for _, w := range tt.reason {
				if !strings.Contains(r.Reason, w) {
					t.Errorf("reason %q does not contain %q", r.Reason, w)
				}
			}
			// A decided run measures no more.
			sent := len(f.got)
			got, wait := a.Step(context.Background(), r, Scope{Pods: []string{"p"}}, r.NextAt.Add(time.Hour))
			if got != r || wait != 0 || len(f.got) != sent {
				t.Errorf("Step on a decided run = %p, %v, %d new queries; want %p, 0, 0", got, wait, len(f.got)-sent, r)
			}
		})
	}
}

func countsString(r *Run) string {
	var b strings.Builder
	for k, c := range r.Counts {
		fmt.Fprintf(&b, "%s:%+v ", k, *c)
	}
	return b.String()
}

func TestStepConsecutiveErrorCounts(t *testing.T) {
	cfg := customConfig("a")
	cfg.Count = 10
	f := (&fakeQuerier{}).exact("a", erroring, erroring, erroring, erroring, pass, erroring, erroring, erroring, erroring, erroring)
	a := &Analyzer{Config: cfg, Querier: f}
	r := NewRun(cfg, 0, t0)
	for range 10 {
		r, _ = a.Step(context.Background(), r, Scope{}, r.NextAt)
	}
	if c := r.Counts["a"]; c == nil || *c != (Counts{Measured: 1, Errors: 9, ConsecutiveErrors: 5}) {
		t.Errorf("counts = %+v, want measured 1, errors 9, consecutive errors 5", c)
	}
	if r.Verdict != Error {
		t.Errorf("verdict %q, want Error", r.Verdict)
	}
}

// Within one check Error over its limit beats Inconclusive, which beats Fail, as in Argo
// Rollouts; a run restored from its stored state continues its counts.
func TestStepPrecedenceWithinCheck(t *testing.T) {
	tests := []struct {
		name   string
		counts Counts
		next   answer
		want   Verdict
	}{
		{"inconclusive beats fail", Counts{Measured: 3, Failed: 2, Inconclusive: 1}, inconclusive, Inconclusive},
		{"error beats inconclusive and fail", Counts{Measured: 4, Failed: 2, Inconclusive: 2, Errors: 1, ConsecutiveErrors: 1}, erroring, Error},
		{"fail alone", Counts{Measured: 1, Failed: 1}, fail, Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := customConfig("a")
			cfg.Count = 10
			cfg.FailureLimit, cfg.InconclusiveLimit, cfg.ConsecutiveErrorLimit = ip(1), ip(1), ip(1)
			a := &Analyzer{Config: cfg, Querier: (&fakeQuerier{}).exact("a", tt.next)}
			prev := NewRun(cfg, 0, t0)
			c := tt.counts
			prev.Counts["a"] = &c
			r, _ := a.Step(context.Background(), prev, Scope{}, prev.NextAt)
			if r.Verdict != tt.want {
				t.Errorf("verdict %q (%s), want %q", r.Verdict, r.Reason, tt.want)
			}
			if *prev.Counts["a"] != tt.counts {
				t.Errorf("Step changed the counts of the run it was given: %+v", *prev.Counts["a"])
			}
		})
	}
}

func TestStepSkipped(t *testing.T) {
	// Saturation without limits is the only check: nothing is measured.
	cfg := onlyChecks(Checks{Saturation: &Saturation{}})
	f := (&fakeQuerier{}).on([]string{"count(kube_pod_container_resource_limits"}, value(0))
	a := &Analyzer{Config: cfg, Querier: f}
	r0 := NewRun(cfg, 0, t0)
	r, wait := a.Step(context.Background(), r0, Scope{Pods: []string{"p"}}, r0.NextAt)
	if r.Verdict != Inconclusive || wait != 0 || !strings.Contains(r.Reason, "every check was skipped") {
		t.Errorf("every check skipped: verdict %q (%s), wait %v; want Inconclusive", r.Verdict, r.Reason, wait)
	}

	// A skipped check neither holds back nor decides the others.
	cfg = onlyChecks(Checks{Saturation: &Saturation{}, Custom: []Custom{{Name: "a", Query: "a", Condition: "result < 1"}}})
	cfg.Count = 2
	f = (&fakeQuerier{}).on([]string{"count(kube_pod_container_resource_limits"}, noData).exact("a", pass)
	a = &Analyzer{Config: cfg, Querier: f}
	r = NewRun(cfg, 0, t0)
	for i, want := range []Verdict{"", Pass} {
		r, _ = a.Step(context.Background(), r, Scope{Pods: []string{"p"}}, r.NextAt)
		if r.Verdict != want {
			t.Errorf("step %d: verdict %q (%s), want %q", i+1, r.Verdict, r.Reason, want)
		}
	}
	f.allMatched(t)
}

func TestStepKeepsLastMeasurementsAndCountsQueries(t *testing.T) {
	cfg := customConfig("a", "b")
	cfg.Count = 10
	cfg.Interval = Duration(time.Minute)
	cfg.InitialDelay = dp(0)
	f := (&fakeQuerier{}).exact("a", pass).exact("b", pass)
	a := &Analyzer{Config: cfg, Querier: f}
	r := NewRun(cfg, 0, t0)
	var runs []*Run
	for i := 1; i <= 5; i++ {
		r, _ = a.Step(context.Background(), r, Scope{}, r.NextAt)
		runs = append(runs, r)
		if r.Queries != 2*i {
			t.Errorf("step %d: Queries = %d, want %d", i, r.Queries, 2*i)
		}
		if want := min(i, keepMeasurements); len(r.Last) != want {
			t.Fatalf("step %d: %d measurements kept, want %d", i, len(r.Last), want)
		}
		// The kept measurements are the latest, oldest first.
		for j, m := range r.Last {
			want := t0.Add(time.Duration(i-len(r.Last)+j) * time.Minute)
			if !m.At.Equal(want) {
				t.Errorf("step %d: Last[%d].At = %v, want %v", i, j, m.At, want)
			}
			if len(m.Results) != 2 || m.Results[0].Check != "a" || m.Results[1].Check != "b" {
				t.Errorf("step %d: Last[%d].Results = %v", i, j, m.Results)
			}
		}
	}
	if keepMeasurements != 3 {
		t.Errorf("keepMeasurements = %d, want 3", keepMeasurements)
	}
	// Earlier runs keep their own measurements.
	if r3 := runs[2]; len(r3.Last) != 3 || !r3.Last[0].At.Equal(t0) || r3.Queries != 6 {
		t.Errorf("the third run changed: %d measurements from %v, %d queries", len(r3.Last), r3.Last[0].At, r3.Queries)
	}
	if len(f.got) != 10 {
		t.Errorf("the querier got %d queries, want 10", len(f.got))
	}
}
