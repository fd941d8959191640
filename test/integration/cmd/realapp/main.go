// Command realapp is the application of the real node's test images: a small HTTP server whose
// behaviour follows its image tag, as the kubelet simulator's images do (kubeletsim's
// behaviorOf), so that a rollout, its analysis and its failures look alike on both nodes.
//
// The tag comes from APP_TAG, which each image's config sets, and the behaviour from its prefix:
//
//	crash*    listens, then exits 1 after APP_CRASH_AFTER [1s]: a real crash
//	slow*     /healthz answers 503 for APP_READY_DELAY [10s, as the simulator's slow images] after start, then 200
//	errors*   / answers 500 (a share APP_ERROR_SHARE [0.3, as the simulator's] of requests, spread evenly)
//	latency*  / answers after APP_LATENCY [300ms]
//	other     healthy (v1, v2, v3)
//
// Everything is served on one port, APP_LISTEN [:8080] (127.0.0.1:0 picks a free port; the
// address is logged on stderr as "listening on ADDR"):
//
//	/          traffic: 200 (or 500) with the tag and a newline as the body
//	/healthz   readiness (also /readyz)
//	/metrics   Prometheus: http_requests_total{code} and http_request_duration_seconds, the
//	           names, label and buckets of the simulator's exposition; namespace and pod come
//	           from the scrape's target relabelling, not from the app
//	/hook/NAME       a lifecycle hook's target (GET or POST): 200, and the call recorded
//	/hook/fail/NAME  the same, but answers 500: a hook that fails
//	/hooklog   the calls recorded, oldest first, one line each: the time (RFC 3339, nanoseconds,
//	           UTC), the method, the name as called (NAME, or fail/NAME; escaped as in a path)
//	           and the tag of the app that answered
//
// The calls are kept in memory, or, with APP_HOOK_LOG [empty] naming a file, appended to it
// before the answer, so that they outlive the container: an in-place update restarts the
// container with a new image, and the hooks before it are answered by the old one, those after
// by the new one. A file that cannot be opened for appending stops the app at start (exit 1).
//
// Each variable has a flag of the same meaning (-tag, -listen, -ready-delay, -latency,
// -error-share, -crash-after, -hook-log) that wins over it. SIGTERM or SIGINT shuts the server
// down gracefully and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// latencyBuckets are kubeletsim's upper bounds of http_request_duration_seconds, so that one
// histogram_quantile reads both nodes alike.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10}

// config is what the app does, from its flags and environment.
type config struct {
	tag        string
	listen     string
	readyDelay time.Duration
	latency    time.Duration
	errorShare float64
	crashAfter time.Duration
	hookLog    string
}

// behaviour is what the tag's prefix asks for.
type behaviour struct{ crashes, slow, errors, latency bool }

func behaviourOf(tag string) behaviour {
	return behaviour{
		crashes: strings.HasPrefix(tag, "crash"),
		slow:    strings.HasPrefix(tag, "slow"),
		errors:  strings.HasPrefix(tag, "errors"),
		latency: strings.HasPrefix(tag, "latency"),
	}
}

func main() {
	cfg, err := parse(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, cfg, os.Stderr)
	stop()
	os.Exit(code)
}

// parse reads the flags, whose defaults come from the environment.
func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("realapp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.tag, "tag", env("APP_TAG", "unknown"), "the image tag; its prefix chooses the behaviour [$APP_TAG]")
	fs.StringVar(&cfg.listen, "listen", env("APP_LISTEN", ":8080"), "address to serve traffic, readiness and metrics on [$APP_LISTEN]")
	fs.StringVar(&cfg.hookLog, "hook-log", env("APP_HOOK_LOG", ""), "file the hook calls are appended to, so they outlive the container; empty keeps them in memory [$APP_HOOK_LOG]")
	durations := []struct {
		dst        *time.Duration
		name, key  string
		def, usage string
	}{
		{&cfg.readyDelay, "ready-delay", "APP_READY_DELAY", "10s", "how long a slow* app stays unready after start"},
		{&cfg.latency, "latency", "APP_LATENCY", "300ms", "how long a latency* app takes to answer"},
		{&cfg.crashAfter, "crash-after", "APP_CRASH_AFTER", "1s", "how long a crash* app runs before it exits 1"},
	}
	for _, d := range durations {
		def, err := time.ParseDuration(env(d.key, d.def))
		if err != nil {
			fmt.Fprintf(stderr, "realapp: $%s: %v\n", d.key, err)
			return config{}, err
		}
		fs.DurationVar(d.dst, d.name, def, d.usage+" [$"+d.key+"]")
	}
	share, err := strconv.ParseFloat(env("APP_ERROR_SHARE", "0.3"), 64)
	if err != nil {
		fmt.Fprintf(stderr, "realapp: $APP_ERROR_SHARE: %v\n", err)
		return config{}, err
	}
	fs.Float64Var(&cfg.errorShare, "error-share", share, "share of an errors* app's answers that are 500, from 0 to 1 [$APP_ERROR_SHARE]")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if cfg.errorShare < 0 || cfg.errorShare > 1 {
		err := fmt.Errorf("error share %g is not between 0 and 1", cfg.errorShare)
		fmt.Fprintln(stderr, "realapp:", err)
		return config{}, err
	}
	return cfg, nil
}

// run serves until ctx ends (exit 0) or a crash* app's time is up (exit 1).
func run(ctx context.Context, cfg config, stderr io.Writer) int {
	// Opened before listening: a test that asked for a log it cannot have learns it from the
	// container's exit, not from a record missing later.
	hooks, err := openHookLog(cfg.hookLog)
	if err != nil {
		fmt.Fprintf(stderr, "realapp: %v\n", err)
		return 1
	}
	defer hooks.close()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		fmt.Fprintf(stderr, "realapp: listening on %s: %v\n", cfg.listen, err)
		return 1
	}
	beh := behaviourOf(cfg.tag)
	a := newApp(cfg, beh, time.Now())
	a.hooks = hooks
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "realapp: %s listening on %s\n", cfg.tag, ln.Addr())

	var crash <-chan time.Time
	if beh.crashes {
		crash = time.After(cfg.crashAfter)
	}
	select {
	case <-crash:
		fmt.Fprintf(stderr, "realapp: %s crashes, as its tag says\n", cfg.tag)
		return 1
	case err := <-served:
		fmt.Fprintf(stderr, "realapp: serving: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	// Shorter than the kubelet's default grace of 30 s, so a stuck connection never earns a SIGKILL.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(stderr, "realapp: shutting down: %v\n", err)
	}
	fmt.Fprintf(stderr, "realapp: %s stopped\n", cfg.tag)
	return 0
}

// app holds the server's state: its metrics and its error spreading.
type app struct {
	cfg      config
	beh      behaviour
	started  time.Time
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	hooks    *hookLog

	mu     sync.Mutex
	served int // traffic requests so far, for spreading the 500s evenly
}

func newApp(cfg config, beh behaviour, started time.Time) *app {
	a := &app{
		cfg: cfg, beh: beh, started: started, hooks: &hookLog{},
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "HTTP requests served by the pod, by status code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "HTTP request latency of the pod.", Buckets: latencyBuckets,
		}, nil),
	}
	a.registry.MustRegister(a.requests, a.duration)
	// Both codes exist from the start, as in the simulator, so that an error ratio over a
	// healthy pod is 0 rather than no data.
	a.requests.WithLabelValues("200")
	a.requests.WithLabelValues("500")
	return a
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	traffic := promhttp.InstrumentHandlerDuration(a.duration, promhttp.InstrumentHandlerCounter(a.requests, http.HandlerFunc(a.serveTraffic)))
	mux.Handle("GET /{$}", traffic)
	mux.HandleFunc("GET /healthz", a.serveReady)
	mux.HandleFunc("GET /readyz", a.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	// Hooks are not traffic: they are neither counted nor timed, so an analysis of the pod
	// never sees them.
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /hook/{name}", a.serveHook(http.StatusOK))
		mux.HandleFunc(m+" /hook/fail/{name}", a.serveHook(http.StatusInternalServerError))
	}
	mux.HandleFunc("GET /hooklog", a.serveHookLog)
	return mux
}

func (a *app) serveTraffic(w http.ResponseWriter, r *http.Request) {
	if a.beh.latency {
		select {
		case <-time.After(a.cfg.latency):
		case <-r.Context().Done():
			return
		}
	}
	code := http.StatusOK
	if a.beh.errors && a.failNext() {
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, a.cfg.tag+"\n")
}

// failNext says whether the next request fails: request n fails when it moves the running
// count of failures, n times the share rounded down, so the share holds over any stretch.
func (a *app) failNext() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.served++
	n := float64(a.served)
	return int(n*a.cfg.errorShare) > int((n-1)*a.cfg.errorShare)
}

func (a *app) serveReady(w http.ResponseWriter, _ *http.Request) {
	if a.beh.slow {
		if left := a.cfg.readyDelay - time.Since(a.started); left > 0 {
			http.Error(w, fmt.Sprintf("starting: ready in %s", left.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = io.WriteString(w, "ok\n")
}

// serveHook records the call, then answers code; a call it could not record is answered 500,
// so that a hook never passes unrecorded.
func (a *app) serveHook(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := url.PathEscape(r.PathValue("name"))
		if code != http.StatusOK {
			name = "fail/" + name
		}
		if err := a.hooks.record(time.Now(), r.Method, name, a.cfg.tag); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, "%s %s\n", name, a.cfg.tag)
	}
}

func (a *app) serveHookLog(w http.ResponseWriter, _ *http.Request) {
	records, err := a.hooks.read()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(records)
}

// hookLog holds the hook calls: in memory, or appended to a file that outlives the container.
type hookLog struct {
	path string

	mu     sync.Mutex
	file   *os.File
	memory []byte
}

// openHookLog opens path for appending, creating it; an empty path keeps the log in memory.
func openHookLog(path string) (*hookLog, error) {
	if path == "" {
		return &hookLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the hook log: %w", err)
	}
	return &hookLog{path: path, file: f}, nil
}

// record adds one line. A file gets it in one write, so a container stopped mid-call leaves
// whole lines for the next one to append to.
func (l *hookLog) record(at time.Time, method, name, tag string) error {
	line := fmt.Sprintf("%s %s %s %s\n", at.UTC().Format(time.RFC3339Nano), method, name, tag)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		l.memory = append(l.memory, line...)
		return nil
	}
	if _, err := l.file.WriteString(line); err != nil {
		return fmt.Errorf("recording the hook call: %w", err)
	}
	return nil
}

// read returns every line recorded, by this container and, with a file, by the ones before it.
func (l *hookLog) read() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return append([]byte(nil), l.memory...), nil
	}
	data, err := os.ReadFile(l.path)
	if err != nil {
		return nil, fmt.Errorf("reading the hook log: %w", err)
	}
	return data, nil
}

func (l *hookLog) close() {
	if l.file != nil {
		_ = l.file.Close()
	}
}
