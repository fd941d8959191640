package main_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode/images"
)

// programs are the compiled binaries, shared by every test of the package.
var programs *images.Programs

func TestMain(m *testing.M) {
	os.Exit(images.RunTests(m, &programs))
}

// start runs the app for tag on loopback and stops it at the end of the test, expecting exit 0
// unless the test already waited for its exit.
func start(t *testing.T, tag string, env ...string) *images.LocalApp {
	t.Helper()
	// Not t.Context(): it ends before the cleanups run, and would kill the app before Stop.
	a, err := programs.StartApp(context.Background(), tag, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		code, err := a.Stop()
		if err != nil || code != 0 {
			t.Errorf("stopping the app %s: exit %d, %v, want exit 0\n%s", tag, code, err, a.Log())
		}
	})
	return a
}

// get fetches path from the app and returns the status code and the body.
func get(t *testing.T, a *images.LocalApp, path string) (int, string) {
	t.Helper()
	return call(t, a, http.MethodGet, path)
}

// call sends a request with method and no body to path on the app and returns the status
// code and the body.
func call(t *testing.T, a *images.LocalApp, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.Addr+path, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(body)
}

// family is one metric family of the app's exposition.
type family struct {
	kind    string
	byCode  map[string]float64 // counters, by their code label
	labels  []string           // label names, sorted, of every series
	count   uint64             // histograms: sample count
	buckets []float64          // histograms: upper bounds
}

// scrape reads /metrics and returns its families by name.
func scrape(t *testing.T, a *images.LocalApp) map[string]family {
	t.Helper()
	code, body := get(t, a, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, body)
	}
	out := map[string]family{}
	for name, f := range families {
		fam := family{kind: f.GetType().String(), byCode: map[string]float64{}}
		for _, m := range f.GetMetric() {
			var code string
			for _, l := range m.GetLabel() {
				if !slices.Contains(fam.labels, l.GetName()) {
					fam.labels = append(fam.labels, l.GetName())
				}
				if l.GetName() == "code" {
					code = l.GetValue()
				}
			}
			if c := m.GetCounter(); c != nil {
				fam.byCode[code] += c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				fam.count += h.GetSampleCount()
				fam.buckets = nil
				for _, b := range h.GetBucket() {
					if math.IsInf(b.GetUpperBound(), 1) {
						continue // the parser's own; the simulator's list leaves it implicit
					}
					fam.buckets = append(fam.buckets, b.GetUpperBound())
				}
			}
		}
		sort.Strings(fam.labels)
		out[name] = fam
	}
	return out
}

// simulatorBuckets are kubeletsim's bounds of http_request_duration_seconds (metrics.go).
var simulatorBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10}

// TestTrafficAndMetricsByTag sends requests to the app of each tag and checks the answers, the
// time they take and what /metrics counts, under the simulator's names, label and buckets.
func TestTrafficAndMetricsByTag(t *testing.T) {
	tests := []struct {
		tag        string
		env        []string
		requests   int
		wantCodes  map[string]float64
		minLatency time.Duration
	}{
		{tag: "v1", requests: 3, wantCodes: map[string]float64{"200": 3, "500": 0}},
		{tag: "v3", requests: 1, wantCodes: map[string]float64{"200": 1, "500": 0}},
		{tag: "errors1", requests: 10, wantCodes: map[string]float64{"200": 7, "500": 3}},
		{tag: "errors1", env: []string{"APP_ERROR_SHARE=1"}, requests: 3, wantCodes: map[string]float64{"200": 0, "500": 3}},
		{tag: "latency1", env: []string{"APP_LATENCY=300ms"}, requests: 2, wantCodes: map[string]float64{"200": 2, "500": 0}, minLatency: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{tt.tag}, tt.env...), ","), func(t *testing.T) {
			a := start(t, tt.tag, tt.env...)
			if code, body := get(t, a, "/healthz"); code != http.StatusOK {
				t.Errorf("GET /healthz: %d %q, want 200", code, body)
			}
			got := map[string]float64{}
			for range tt.requests {
				began := time.Now()
				code, body := get(t, a, "/")
				if took := time.Since(began); took < tt.minLatency {
					t.Errorf("GET / took %s, want at least %s", took, tt.minLatency)
				}
				if body != tt.tag+"\n" {
					t.Errorf("GET / body %q, want the tag %q", body, tt.tag+"\n")
				}
				got[fmt.Sprint(code)]++
			}
			for code, n := range tt.wantCodes {
				if got[code] != n {
					t.Errorf("%d answers %s, want %g (all: %v)", int(got[code]), code, n, got)
				}
			}

			m := scrape(t, a)
			requests, latency := m["http_requests_total"], m["http_request_duration_seconds"]
			if requests.kind != "COUNTER" || !slices.Equal(requests.labels, []string{"code"}) {
				t.Errorf("http_requests_total is a %s with labels %v, want a COUNTER with [code]", requests.kind, requests.labels)
			}
			for code, n := range tt.wantCodes {
				if requests.byCode[code] != n {
					t.Errorf(`http_requests_total{code=%q} = %g, want %g`, code, requests.byCode[code], n)
				}
			}
			if latency.kind != "HISTOGRAM" || len(latency.labels) != 0 {
				t.Errorf("http_request_duration_seconds is a %s with labels %v, want a HISTOGRAM with none", latency.kind, latency.labels)
			}
			if latency.count != uint64(tt.requests) {
				t.Errorf("http_request_duration_seconds_count = %d, want %d: only traffic is measured", latency.count, tt.requests)
			}
			if !slices.Equal(latency.buckets, simulatorBuckets) {
				t.Errorf("http_request_duration_seconds buckets %v, want the simulator's %v", latency.buckets, simulatorBuckets)
			}
		})
	}
}

// TestSlowBecomesReadyLate checks that a slow* app's readiness fails at first and passes once
// its delay is over, while a healthy app is ready at once.
func TestSlowBecomesReadyLate(t *testing.T) {
	const delay = time.Second
	began := time.Now()
	a := start(t, "slow1", "APP_READY_DELAY="+delay.String())
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, a, path); code != http.StatusServiceUnavailable {
			t.Fatalf("GET %s at once: %d %q, want 503", path, code, body)
		}
	}
	if code, body := get(t, a, "/"); code != http.StatusOK || body != "slow1\n" {
		t.Errorf("GET / while unready: %d %q, want 200 slow1: traffic is served all along", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := get(t, a, "/healthz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz still %d after 10 s", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took := time.Since(began); took < delay {
		t.Errorf("ready after %s, want at least %s", took, delay)
	}
}

// TestExitCodes checks how the app ends: a crash* app exits 1 on its own; SIGTERM and SIGINT
// end any app with 0.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		tag    string
		env    []string
		signal os.Signal
		want   int
	}{
		{name: "crash exits 1", tag: "crash1", env: []string{"APP_CRASH_AFTER=200ms"}, want: 1},
		{name: "SIGTERM exits 0", tag: "v1", signal: syscall.SIGTERM, want: 0},
		{name: "SIGINT exits 0", tag: "v2", signal: os.Interrupt, want: 0},
		{name: "SIGTERM before a crash exits 0", tag: "crash1", env: []string{"APP_CRASH_AFTER=1m"}, signal: syscall.SIGTERM, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := programs.StartApp(context.Background(), tt.tag, tt.env...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = a.Stop() })
			if tt.signal != nil {
				// The app was serving when the signal came.
				if code, _ := get(t, a, "/"); code != http.StatusOK {
					t.Fatalf("GET /: %d, want 200", code)
				}
				if err := a.Signal(tt.signal); err != nil {
					t.Fatal(err)
				}
			}
			code, err := a.Wait(5 * time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, a.Log())
			}
			if code != tt.want {
				t.Errorf("exit %d, want %d\n%s", code, tt.want, a.Log())
			}
		})
	}
}

// hookRecord is one line of /hooklog.
type hookRecord struct {
	at                time.Time
	method, name, tag string
}

// hookLog reads /hooklog and parses its lines.
func hookLog(t *testing.T, a *images.LocalApp) []hookRecord {
	t.Helper()
	code, body := get(t, a, "/hooklog")
	if code != http.StatusOK {
		t.Fatalf("GET /hooklog: %d %q, want 200", code, body)
	}
	var out []hookRecord
	for line := range strings.Lines(body) {
		f := strings.Fields(line)
		if len(f) != 4 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("/hooklog line %q is not TIME METHOD NAME TAG and a newline:\n%s", line, body)
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("/hooklog line %q: %v", line, err)
		}
		out = append(out, hookRecord{at: at, method: f[1], name: f[2], tag: f[3]})
	}
	return out
}

// describeHooks is records as "METHOD NAME TAG" strings, without their times.
func describeHooks(records []hookRecord) []string {
	out := make([]string, 0, len(records))
	for _, r := range records {
		out = append(out, r.method+" "+r.name+" "+r.tag)
	}
	return out
}

// TestHookCalls calls the hook endpoints, kept in memory and in a file: each call to
// /hook/NAME answers 200 and each to /hook/fail/NAME 500, each is recorded once, in order, with
// its time, method, name and the app's tag; other methods are refused unrecorded, and hook calls
// are not counted as traffic.
func TestHookCalls(t *testing.T) {
	calls := []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/hook/pre", http.StatusOK},
		{http.MethodGet, "/hook/post", http.StatusOK},
		{http.MethodPost, "/hook/fail/pre", http.StatusInternalServerError},
		{http.MethodGet, "/hook/fail/post", http.StatusInternalServerError},
		{http.MethodPut, "/hook/pre", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/hook/fail/pre", http.StatusMethodNotAllowed},
		{http.MethodPost, "/hook/with%20space", http.StatusOK},
	}
	wantLog := []string{"POST pre v2", "GET post v2", "POST fail/pre v2", "GET fail/post v2", "POST with%20space v2"}
	tests := []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{name: "in memory", env: func(*testing.T) []string { return nil }},
		{name: "in a file", env: func(t *testing.T) []string {
			return []string{"APP_HOOK_LOG=" + filepath.Join(t.TempDir(), "hooks.log")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := start(t, "v2", tt.env(t)...)
			if got := hookLog(t, a); len(got) != 0 {
				t.Fatalf("/hooklog before any call: %v, want nothing", describeHooks(got))
			}
			began := time.Now()
			for _, c := range calls {
				if code, body := call(t, a, c.method, c.path); code != c.want {
					t.Errorf("%s %s: %d %q, want %d", c.method, c.path, code, body, c.want)
				}
			}
			ended := time.Now()
			got := hookLog(t, a)
			if !slices.Equal(describeHooks(got), wantLog) {
				t.Errorf("/hooklog %q, want %q", describeHooks(got), wantLog)
			}
			for i, r := range got {
				if r.at.Before(began.Add(-time.Millisecond)) || r.at.After(ended.Add(time.Millisecond)) {
					t.Errorf("record %d at %s, outside the calls' %s to %s", i, r.at, began, ended)
				}
				if i > 0 && r.at.Before(got[i-1].at) {
					t.Errorf("record %d at %s, before record %d at %s", i, r.at, i-1, got[i-1].at)
				}
			}
			requests := scrape(t, a)["http_requests_total"]
			if n := requests.byCode["200"] + requests.byCode["500"]; n != 0 {
				t.Errorf("http_requests_total counts %g requests after hook calls only, want 0: a hook is not traffic", n)
			}
		})
	}
}

// TestHookLogOutlivesTheApp runs v1 and then v2 on one log, as an in-place update restarts the
// container with a new image: with a file, v2's /hooklog holds v1's call too, each with the tag
// that answered it; in memory, v2 knows only its own.
func TestHookLogOutlivesTheApp(t *testing.T) {
	tests := []struct {
		name string
		file bool
		want []string
	}{
		{name: "in a file", file: true, want: []string{"POST pre v1", "POST post v2"}},
		{name: "in memory", want: []string{"POST post v2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env []string
			if tt.file {
				env = []string{"APP_HOOK_LOG=" + filepath.Join(t.TempDir(), "hooks.log")}
			}
			old, err := programs.StartApp(context.Background(), "v1", env...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = old.Stop() })
			if code, body := call(t, old, http.MethodPost, "/hook/pre"); code != http.StatusOK {
				t.Fatalf("POST /hook/pre to v1: %d %q", code, body)
			}
			if code, err := old.Stop(); err != nil || code != 0 {
				t.Fatalf("stopping v1: exit %d, %v\n%s", code, err, old.Log())
			}
			a := start(t, "v2", env...)
			if code, body := call(t, a, http.MethodPost, "/hook/post"); code != http.StatusOK {
				t.Fatalf("POST /hook/post to v2: %d %q", code, body)
			}
			if got := describeHooks(hookLog(t, a)); !slices.Equal(got, tt.want) {
				t.Errorf("/hooklog of v2 %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHookLogUnwritable starts the app with a hook log it cannot open, from the flag or the
// environment: it exits 1 at once, naming the file, before it listens. The flag wins over the
// variable.
func TestHookLogUnwritable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir", "hooks.log")
	good := filepath.Join(t.TempDir(), "hooks.log")
	tests := []struct {
		name string
		args []string
		env  []string
	}{
		{name: "flag", args: []string{"-hook-log", missing}},
		{name: "environment", env: []string{"APP_HOOK_LOG=" + missing}},
		{name: "flag over environment", args: []string{"-hook-log=" + missing}, env: []string{"APP_HOOK_LOG=" + good}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, programs.App, tt.args...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "APP_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, append([]string{"APP_TAG=v1", "APP_LISTEN=127.0.0.1:0"}, tt.env...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1\n%s", err, out)
			}
			if !strings.Contains(string(out), missing) || strings.Contains(string(out), "listening on") {
				t.Errorf("output does not name %s, or the app listened first:\n%s", missing, out)
			}
		})
	}
}
