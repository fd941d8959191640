// Command benchreport measures a rollout done each way a user could do it, side by side on a
// local control plane (every driver at one rate limit; then, on a second one, each component
// at its own default; on a third, inplace-rollout and the floor at 5,000 pods), and writes
// docs/benchmarks.md with its plots (`make bench` runs it).
// `benchreport floor ...` is the floor loop, run by the report as a process of its own.
package main

import (
	"context"
	"encoding/gob"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inplace-rollout/inplace-rollout/test/integration/benchreport"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		err = floor(ctx, os.Args[2:])
	} else {
		err = report(ctx, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// The simulated kubelet's delays: what a pod start costs. An image update in place pays the
// pull and the start; a recreated pod pays scheduling and its sandbox (network, IP, volumes)
// first.
const (
	defaultNodes  = 10
	pullDelay     = 200 * time.Millisecond
	startDelay    = 200 * time.Millisecond
	scheduleDelay = 100 * time.Millisecond
	sandboxDelay  = time.Second
	// simulatorQPS is what 10 kubelets at their default rate limit (50 requests/s) send at most.
	simulatorQPS = 500
	// clientQPS and clientBurst are the inplace-rollout command's default rate limit, one
	// token bucket for all its requests, which the floor loop shares unless -qps and -burst
	// say otherwise, and which the main table gives every driver.
	clientQPS   = 100
	clientBurst = 200
	// kube-controller-manager's default rate limit (--kube-api-qps, --kube-api-burst) and
	// kruise-manager's (--rest-config-qps, --rest-config-burst in OpenKruise's main.go), which
	// the table of own defaults keeps.
	controllerManagerQPS, controllerManagerBurst = 20, 30
	kruiseQPS, kruiseBurst                       = 30, 50
)

// pass is one control plane's rows: every driver at one rate limit (the main table), each at
// its own default, or inplace-rollout and the floor at larger sizes (the scale pass).
type pass struct {
	limits Limits
	// qps and burst are the main table's rate limit; zero in the pass of own defaults.
	qps   float64
	burst int
	// sizes, nodes and reps are the pod counts, the simulated kubelets and the repetitions.
	sizes       []int
	nodes, reps int
}

// Limits is benchreport.Limits, shortened.
type Limits = benchreport.Limits

func report(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	out := fs.String("out", "docs", "directory to write benchmarks.md and its plots into")
	sizesFlag := fs.String("sizes", "100,300,1000", "pod counts to measure, comma-separated")
	cli := fs.String("cli", ".dev/bin/inplace-rollout", "the inplace-rollout binary")
	work := fs.String("work", ".dev/bench", "directory for the control plane's files and the CPU profile")
	timeout := fs.Duration("timeout", 10*time.Minute, "longest one rollout may take")
	qps := fs.Float64("qps", clientQPS, "requests per second allowed to every driver in the main table (a whole number: kruise-manager takes no fraction)")
	burst := fs.Int("burst", clientBurst, "requests allowed in a burst above -qps, to every driver in the main table")
	reps := fs.Int("repetitions", 5, "times each approach is measured at each size, interleaved: the report gives each figure's median and range")
	seed := fs.Uint64("seed", 1, "seed of the order the approaches are measured in, shuffled for each repetition and size")
	mainTable := fs.Bool("main", true, "measure the main table: every driver at -qps and -burst")
	defaults := fs.Bool("defaults", true, "measure each component at its own default rate limit, on a control plane of its own")
	from := fs.String("from", "", "write the report from the results runs saved (each run's -work directory's "+savedResults+", comma-separated: the tables of runs with -main, -defaults or -scale false merge), measuring nothing")
	nodes := fs.Int("nodes", defaultNodes, "simulated kubelets the pods are spread over (a kubelet takes 110 pods by default: 5,000 pods want 50)")
	scale := fs.Bool("scale", true, "measure inplace-rollout and the floor at -scale-sizes on a control plane of their own with -scale-nodes simulated kubelets, at -qps and -burst")
	scaleSizes := fs.String("scale-sizes", "1000,5000", "pod counts of the -scale pass, comma-separated: the report gives the growth of the cost per pod from the first to the last")
	scaleNodes := fs.Int("scale-nodes", 50, "simulated kubelets of the -scale pass")
	scaleReps := fs.Int("scale-repetitions", 3, "times each approach of the -scale pass is measured at each size, interleaved")
	conditions := fs.String("conditions", "", "what else shared the machine during the run, or anything else that bears on its numbers, given in the report under its header")
	only := fs.String("only", "", "approaches to measure, comma-separated (inplace-rollout, inplace-rollout-gated, inplace-rollout-window, floor, statefulset-rollingupdate, deployment-rollingupdate, kruise-cloneset); empty: all, and the report is written")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sizes, err := parseSizes("-sizes", *sizesFlag)
	if err != nil {
		return err
	}
	bigSizes, err := parseSizes("-scale-sizes", *scaleSizes)
	if err != nil {
		return err
	}
	if *nodes < 1 || *scaleNodes < 1 {
		return fmt.Errorf("-nodes %d -scale-nodes %d: want at least 1", *nodes, *scaleNodes)
	}
	if *reps < 1 || *scaleReps < 1 {
		return fmt.Errorf("-repetitions %d -scale-repetitions %d: want at least 1", *reps, *scaleReps)
	}
	if *qps <= 0 || *burst <= 0 || *qps != float64(int(*qps)) {
		return fmt.Errorf("-qps %v -burst %d: want both above 0, whole numbers", *qps, *burst)
	}
	cliPath, err := filepath.Abs(*cli)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cliPath); err != nil {
		return fmt.Errorf("the inplace-rollout binary: %w (run make build)", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this command's binary for the floor loop: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *from != "" {
		r, err := loadResults(strings.Split(*from, ","))
		if err != nil {
			return err
		}
		if *conditions != "" {
			r.Conditions = *conditions
		}
		return write(ctx, r, cliPath, *out, *only != "", log)
	}
	if !*mainTable && !*defaults && !*scale {
		return fmt.Errorf("-main=false -defaults=false -scale=false: nothing to measure")
	}
	profile := filepath.Join(*work, "inplace-rollout-cpu.pprof")
	r := &benchreport.Report{
		Date:        time.Now(),
		Machine:     fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH),
		Settings:    settings(*nodes),
		RateLimits:  map[Limits]map[benchreport.Approach]benchreport.RateLimit{},
		ProfileFile: profile,
		ClientQPS:   *qps,
		ClientBurst: *burst,
		Repetitions: *reps,
		Seed:        *seed,
		Conditions:  *conditions,
	}
	var passes []pass
	if *mainTable {
		passes = append(passes, pass{limits: benchreport.EqualLimits, qps: *qps, burst: *burst, sizes: sizes, nodes: *nodes, reps: *reps})
	}
	if *defaults {
		passes = append(passes, pass{limits: benchreport.DefaultLimits, sizes: sizes, nodes: *nodes, reps: *reps})
	}
	if *scale {
		passes = append(passes, pass{limits: benchreport.ScaleLimits, qps: *qps, burst: *burst, sizes: bigSizes, nodes: *scaleNodes, reps: *scaleReps})
	}
	for _, p := range passes {
		b := &benchreport.Bench{
			CLI: cliPath, Limits: p.limits, ClientQPS: clientQPS, ClientBurst: clientBurst,
			FloorCommand: []string{self, "floor", "-qps", strconv.Itoa(clientQPS), "-burst", strconv.Itoa(clientBurst)},
			LogDir:       *work, Timeout: *timeout, Log: log.With("limits", p.limits),
			Repetitions: p.reps, Seed: *seed,
		}
		if p.qps > 0 {
			b.ClientQPS, b.ClientBurst = p.qps, p.burst
			b.FloorCommand = []string{self, "floor", "-qps", strconv.FormatFloat(p.qps, 'f', -1, 64), "-burst", strconv.Itoa(p.burst)}
		} else {
			// The in-place variants differ from inplace-rollout's row in their rollout, not in
			// a default: the main table has them.
			b.Approaches = []benchreport.Approach{benchreport.InPlace, benchreport.FloorLoop,
				benchreport.StatefulSetRolling, benchreport.DeploymentRolling, benchreport.CloneSetInPlace}
		}
		switch p.limits {
		case benchreport.EqualLimits:
			b.ProfileFile = profile
		case benchreport.ScaleLimits:
			b.Approaches = []benchreport.Approach{benchreport.InPlace, benchreport.FloorLoop}
			// Kept beside the main table's for `go tool pprof`; the report shows the main one.
			b.ProfileFile = filepath.Join(*work, "inplace-rollout-cpu-scale.pprof")
			r.ScaleNodes, r.ScaleDate = p.nodes, time.Now()
		}
		if *only != "" {
			b.Only = map[benchreport.Approach]bool{}
			for _, a := range strings.Split(*only, ",") {
				b.Only[benchreport.Approach(strings.TrimSpace(a))] = true
			}
		}
		r.RateLimits[p.limits] = rateLimits(p)
		results, skipped, err := runPass(ctx, b, p, filepath.Join(*work, "cluster-"+string(p.limits)))
		r.Results = append(r.Results, results...)
		if skipped != "" {
			r.CloneSetSkipped = skipped
		}
		// What was measured outlives a later failure: -from writes the report from it.
		if serr := saveResults(filepath.Join(*work, savedResults), r); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
	}
	if !*mainTable {
		// The report is written around the main table: -from merges this run's results with
		// those of a run that measured it.
		log.Info("no main table measured: write the report with -from", "results", filepath.Join(*work, savedResults))
	}
	return write(ctx, r, cliPath, *out, *only != "" || !*mainTable, log)
}

// parseSizes parses flag's value, pod counts of at least 10, comma-separated.
func parseSizes(flag, value string) ([]int, error) {
	var sizes []int
	for _, s := range strings.Split(value, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			return nil, fmt.Errorf("%s %q: want pod counts of at least 10, comma-separated", flag, value)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// savedResults is the file in the -work directory that keeps a run's results, pass by pass.
const savedResults = "results.gob"

func saveResults(path string, r *benchreport.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("saving the results: %w", err)
	}
	if err := gob.NewEncoder(f).Encode(r); err != nil {
		f.Close()
		return fmt.Errorf("saving the results to %s: %w", path, err)
	}
	return f.Close()
}

// loadResults reads the results runs saved and merges them: the report of the run that measured
// the main table (its date, settings, repetitions and profile), with every run's results and
// rate limits.
func loadResults(paths []string) (*benchreport.Report, error) {
	var reports []*benchreport.Report
	for _, path := range paths {
		r, err := loadResult(path)
		if err != nil {
			return nil, err
		}
		reports = append(reports, r)
	}
	i := slices.IndexFunc(reports, func(r *benchreport.Report) bool {
		return slices.ContainsFunc(r.Results, func(res benchreport.Result) bool { return res.Limits == benchreport.EqualLimits })
	})
	if i < 0 {
		return nil, fmt.Errorf("-from %s: no run measured the main table (-main)", strings.Join(paths, ","))
	}
	merged := reports[i]
	for j, r := range reports {
		if j == i {
			continue
		}
		merged.Results = append(merged.Results, r.Results...)
		for limits, l := range r.RateLimits {
			merged.RateLimits[limits] = l
		}
		if merged.CloneSetSkipped == "" {
			merged.CloneSetSkipped = r.CloneSetSkipped
		}
		if r.ScaleNodes != 0 {
			merged.ScaleNodes, merged.ScaleDate = r.ScaleNodes, r.ScaleDate
		}
	}
	return merged, nil
}

func loadResult(path string) (*benchreport.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading saved results: %w", err)
	}
	defer f.Close()
	r := &benchreport.Report{}
	if err := gob.NewDecoder(f).Decode(r); err != nil {
		return nil, fmt.Errorf("reading saved results from %s: %w", path, err)
	}
	// Results kept past their -work directory (docs/benchmarks/ holds the last run's, so a
	// later pass can merge with them) keep the CPU profile beside them.
	if r.ProfileFile != "" {
		if _, err := os.Stat(r.ProfileFile); err != nil {
			r.ProfileFile = filepath.Join(filepath.Dir(path), filepath.Base(r.ProfileFile))
		}
	}
	return r, nil
}

// settings are the report's settings that are not rate limits.
func settings(nodes int) []benchreport.Setting {
	return []benchreport.Setting{
		{Name: "Kubernetes (kube-apiserver, kube-controller-manager, etcd)", Value: "v1.34 and etcd as `make tools` builds them; feature gate MaxUnavailableStatefulSet on (alpha in v1.34) for the StatefulSet's `maxUnavailable`"},
		{Name: "OpenKruise (kruise-manager)", Value: cluster.KruiseVersion + ", as `" + cluster.KruiseBuild + "` builds it"},
		{Name: "nodes", Value: strconv.Itoa(nodes) + " simulated kubelets, one process"},
		{Name: "image pull, container start to Ready", Value: fmt.Sprintf("%s, %s (every container start, in place or not)", pullDelay, startDelay)},
		{Name: "scheduling a new pod", Value: scheduleDelay.String()},
		{Name: "a new pod's sandbox, network, IP and volumes", Value: sandboxDelay.String() + " (paid by recreated pods only)"},
		{Name: "kubelets' API rate limit", Value: fmt.Sprintf("%d requests/s in all", simulatorQPS)},
		{Name: "gate controller (inplace-rollout-gated's pods)", Value: "pkg/gate in the benchmark's process, its own client at the drivers' rate limit; " +
			"it sets the gate True on a pod that has no such condition yet, a new pod: the rollout's engine drains and readies the gate of the pods it updates"},
	}
}

// rateLimits are the rate limits each approach's driver has in pass p, with the flags that set
// them.
func rateLimits(p pass) map[benchreport.Approach]benchreport.RateLimit {
	const (
		cliNote    = "one token bucket for every request of the command, its Events included"
		floorNote  = "one client"
		kcmNote    = "each of its controllers' clients has a token bucket of its own"
		kruiseNote = "on the rest.Config each of its clients is built from, each client with a token bucket of its own"
	)
	if p.qps == 0 {
		cli := benchreport.RateLimit{QPS: clientQPS, Burst: clientBurst, Note: cliNote}
		kcm := benchreport.RateLimit{QPS: controllerManagerQPS, Burst: controllerManagerBurst, Note: "kube-controller-manager's; " + kcmNote}
		return map[benchreport.Approach]benchreport.RateLimit{
			benchreport.InPlace:            cli,
			benchreport.FloorLoop:          {QPS: clientQPS, Burst: clientBurst, Flags: fmt.Sprintf("-qps %d -burst %d", clientQPS, clientBurst), Note: floorNote + ", at inplace-rollout's default"},
			benchreport.StatefulSetRolling: kcm,
			benchreport.DeploymentRolling:  kcm,
			benchreport.CloneSetInPlace:    {QPS: kruiseQPS, Burst: kruiseBurst, Note: kruiseNote},
		}
	}
	q := strconv.FormatFloat(p.qps, 'f', -1, 64)
	kcm := benchreport.RateLimit{QPS: p.qps, Burst: p.burst, Flags: fmt.Sprintf("--kube-api-qps=%s --kube-api-burst=%d", q, p.burst), Note: "kube-controller-manager's; " + kcmNote}
	cli := benchreport.RateLimit{QPS: p.qps, Burst: p.burst, Flags: fmt.Sprintf("--kube-api-qps %s --kube-api-burst %d", q, p.burst), Note: cliNote}
	return map[benchreport.Approach]benchreport.RateLimit{
		benchreport.InPlace:            cli,
		benchreport.InPlaceGated:       cli,
		benchreport.InPlaceWindow:      cli,
		benchreport.FloorLoop:          {QPS: p.qps, Burst: p.burst, Flags: fmt.Sprintf("-qps %s -burst %d", q, p.burst), Note: floorNote},
		benchreport.StatefulSetRolling: kcm,
		benchreport.DeploymentRolling:  kcm,
		benchreport.CloneSetInPlace:    {QPS: p.qps, Burst: p.burst, Flags: fmt.Sprintf("--rest-config-qps=%s --rest-config-burst=%d", q, p.burst), Note: kruiseNote},
	}
}

// runPass starts a control plane in dir for pass p, measures b's approaches on it and stops
// it. skipped says why the CloneSet rows are missing, when they are.
func runPass(ctx context.Context, b *benchreport.Bench, p pass, dir string) (results []benchreport.Result, skipped string, err error) {
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("creating %s: %w", dir, err)
	}
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: dir,
		Simulator: kubeletsim.Config{Nodes: p.nodes, Workers: 16, PullDelay: pullDelay, StartDelay: startDelay,
			ScheduleDelay: scheduleDelay, SandboxDelay: sandboxDelay},
		FeatureGates:           "MaxUnavailableStatefulSet=true",
		SimulatorQPS:           simulatorQPS,
		ControllerManagerQPS:   float32(p.qps),
		ControllerManagerBurst: p.burst,
		// Every client's requests, at Metadata level, for the table of requests by client.
		AuditLog:      true,
		AuditEveryone: true,
		Logger:        b.Log.With("component", "cluster"),
	})
	if err != nil {
		return nil, "", err
	}
	defer c.Stop()
	if b.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, "", fmt.Errorf("building a dynamic client: %w", err)
	}
	b.Client, b.Config, b.Kubeconfig = c.Client, c.Config, c.Kubeconfig
	b.Serving = c.Sim.Serving
	kcm, ok1 := c.PID("kube-controller-manager")
	apiserver, ok2 := c.PID("kube-apiserver")
	etcd, ok3 := c.PID("etcd")
	if !ok1 || !ok2 || !ok3 {
		return nil, "", fmt.Errorf("the control plane's kube-controller-manager, kube-apiserver or etcd is not running")
	}
	b.ControllerManagerPID, b.APIServerPID, b.EtcdPID = kcm, apiserver, etcd
	if b.AuditLog, err = c.AuditLogFile(); err != nil {
		return nil, "", err
	}
	b.StartKruise = func(ctx context.Context) (int, func() error, error) {
		k, err := c.StartKruise(ctx, cluster.KruiseOptions{QPS: int(p.qps), Burst: p.burst, Settled: true})
		if err != nil {
			return 0, nil, fmt.Errorf("kruise-manager %s did not start here: %w", cluster.KruiseVersion, err)
		}
		return k.PID(), k.Stop, nil
	}
	results, err = b.Run(ctx, p.sizes)
	return results, b.KruiseSkipped, err
}

// write prints the results and, unless partial, writes the report and its plots into out.
func write(ctx context.Context, r *benchreport.Report, cliPath, out string, partial bool, log *slog.Logger) error {
	if top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount", "25", cliPath, r.ProfileFile).Output(); err == nil {
		r.Profile = string(top)
	} else {
		log.Warn("no profile in the report", "profile", r.ProfileFile, "err", err)
	}
	if err := benchreport.Table(os.Stdout, r.Results); err != nil {
		return err
	}
	if partial {
		return nil // a partial run: the table above, no report
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	f, err := os.Create(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	defer f.Close()
	if err := benchreport.Render(f, r); err != nil {
		return err
	}
	if err := benchreport.WritePlots(out, r); err != nil {
		return err
	}
	fmt.Printf("wrote %s and its plots in %s\n", f.Name(), time.Since(r.Date).Round(time.Second))
	return f.Close()
}

// floor runs the floor loop, by default at the inplace-rollout command's default rate limit.
func floor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file")
	var spec benchreport.FloorSpec
	fs.StringVar(&spec.Namespace, "namespace", "", "namespace of the pods")
	fs.StringVar(&spec.App, "app", "", "the pods' label app")
	fs.StringVar(&spec.Container, "container", "", "container whose image changes")
	fs.StringVar(&spec.Image, "image", "", "new image")
	batches := fs.String("batches", "", "cumulative pod counts after each batch, comma-separated")
	qps := fs.Float64("qps", clientQPS, "requests per second to the Kubernetes API")
	burst := fs.Int("burst", clientBurst, "requests allowed in a burst above -qps")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(*batches, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("-batches %q: want pod counts, comma-separated", *batches)
		}
		spec.Batches = append(spec.Batches, n)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w", *kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	// Its requests, in the audit log, apart from the benchmark's own.
	cfg.UserAgent = "floor-loop"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	return benchreport.Floor(ctx, client, spec)
}
