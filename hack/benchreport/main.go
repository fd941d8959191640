// Command benchreport measures a rollout done each way a user could do it, side by side on one
// local control plane, and writes docs/benchmarks.md with its plots (`make bench` runs it).
// `benchreport floor ...` is the floor loop, run by the report as a process of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
	nodes         = 10
	pullDelay     = 200 * time.Millisecond
	startDelay    = 200 * time.Millisecond
	scheduleDelay = 100 * time.Millisecond
	sandboxDelay  = time.Second
	// simulatorQPS is what 10 kubelets at their default rate limit (50 requests/s) send at most.
	simulatorQPS = 500
	// clientQPS and clientBurst are the inplace-rollout command's default rate limit, which
	// the floor loop shares unless -qps and -burst say otherwise.
	clientQPS   = 100
	clientBurst = 200
	// kube-controller-manager's default rate limit (--kube-api-qps, --kube-api-burst), which
	// the local control plane keeps, and kruise-manager's (--rest-config-qps,
	// --rest-config-burst): both lower than clientQPS, so the controllers' wall times are not
	// measured at inplace-rollout's.
	controllerManagerQPS, controllerManagerBurst = 20, 30
	kruiseQPS, kruiseBurst                       = 30, 50
)

func report(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	out := fs.String("out", "docs", "directory to write benchmarks.md and its plots into")
	sizesFlag := fs.String("sizes", "100,300,1000", "pod counts to measure, comma-separated")
	cli := fs.String("cli", ".dev/bin/inplace-rollout", "the inplace-rollout binary")
	work := fs.String("work", ".dev/bench", "directory for the control plane's files and the CPU profile")
	timeout := fs.Duration("timeout", 10*time.Minute, "longest one rollout may take")
	qps := fs.Float64("qps", clientQPS, "requests per second allowed to inplace-rollout and to the floor loop")
	burst := fs.Int("burst", clientBurst, "requests allowed in a burst above -qps, to inplace-rollout and to the floor loop")
	only := fs.String("only", "", "approaches to measure, comma-separated (inplace-rollout, floor, statefulset-rollingupdate, deployment-rollingupdate, kruise-cloneset); empty: all, and the report is written")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			return fmt.Errorf("-sizes %q: want pod counts of at least 10, comma-separated", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	if *qps <= 0 || *burst <= 0 {
		return fmt.Errorf("-qps %v -burst %d: want both above 0", *qps, *burst)
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
	dir, err := filepath.Abs(filepath.Join(*work, "cluster"))
	if err != nil {
		return err
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}

	started := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: dir,
		Simulator: kubeletsim.Config{Nodes: nodes, Workers: 16, PullDelay: pullDelay, StartDelay: startDelay,
			ScheduleDelay: scheduleDelay, SandboxDelay: sandboxDelay},
		FeatureGates: "MaxUnavailableStatefulSet=true",
		SimulatorQPS: simulatorQPS,
		Logger:       log.With("component", "cluster"),
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("building a dynamic client: %w", err)
	}
	kcm, ok1 := c.PID("kube-controller-manager")
	apiserver, ok2 := c.PID("kube-apiserver")
	if !ok1 || !ok2 {
		return fmt.Errorf("the control plane's kube-controller-manager or kube-apiserver is not running")
	}
	kruise := startKruise(ctx, c)
	profile := filepath.Join(*work, "inplace-rollout-cpu.pprof")
	b := &benchreport.Bench{
		Client: c.Client, Dynamic: dyn, Kubeconfig: c.Kubeconfig, CLI: cliPath,
		FloorCommand: []string{self, "floor", "-qps", strconv.FormatFloat(*qps, 'f', -1, 64), "-burst", strconv.Itoa(*burst)},
		ClientQPS:    *qps, ClientBurst: *burst,
		ControllerManagerPID: kcm, APIServerPID: apiserver,
		Kruise:      kruise,
		ProfileFile: profile, LogDir: *work, Timeout: *timeout, Log: log,
	}
	if *only != "" {
		b.Only = map[benchreport.Approach]bool{}
		for _, a := range strings.Split(*only, ",") {
			b.Only[benchreport.Approach(strings.TrimSpace(a))] = true
		}
	}
	r := &benchreport.Report{
		Date:    started,
		Machine: fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH),
		Settings: []benchreport.Setting{
			{Name: "Kubernetes (kube-apiserver, kube-controller-manager, etcd)", Value: "v1.34 and etcd as `make tools` builds them; feature gate MaxUnavailableStatefulSet on (alpha in v1.34) for the StatefulSet's `maxUnavailable`"},
			{Name: "nodes", Value: strconv.Itoa(nodes) + " simulated kubelets, one process"},
			{Name: "image pull, container start to Ready", Value: fmt.Sprintf("%s, %s (every container start, in place or not)", pullDelay, startDelay)},
			{Name: "scheduling a new pod", Value: scheduleDelay.String()},
			{Name: "a new pod's sandbox, network, IP and volumes", Value: sandboxDelay.String() + " (paid by recreated pods only)"},
			{Name: "kubelets' API rate limit", Value: fmt.Sprintf("%d requests/s in all", simulatorQPS)},
		},
		RateLimits: map[benchreport.Approach]benchreport.RateLimit{
			benchreport.InPlace: {QPS: *qps, Burst: *burst, Note: fmt.Sprintf("the command's default is %d, %d; "+
				"on each of its two clients, one for the rollout and one for its Events", clientQPS, clientBurst)},
			benchreport.FloorLoop: {QPS: *qps, Burst: *burst, Note: "inplace-rollout's"},
			benchreport.StatefulSetRolling: {QPS: controllerManagerQPS, Burst: controllerManagerBurst,
				Note: "kube-controller-manager's default, on each controller's client"},
			benchreport.DeploymentRolling: {QPS: controllerManagerQPS, Burst: controllerManagerBurst,
				Note: "kube-controller-manager's default, on each controller's client"},
			benchreport.CloneSetInPlace: {QPS: kruiseQPS, Burst: kruiseBurst, Note: "kruise-manager's default, one client for all its controllers"},
		},
		ProfileFile: profile,
		ClientQPS:   *qps,
		ClientBurst: *burst,
	}
	results, runErr := b.Run(ctx, sizes)
	if _, err := kruise(); err != nil {
		r.CloneSetSkipped = err.Error()
	}
	r.Results = results
	if runErr != nil {
		return runErr
	}
	if top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount", "25", cliPath, profile).Output(); err == nil {
		r.Profile = string(top)
	} else {
		log.Warn("no profile in the report", "profile", profile, "err", err)
	}
	if err := benchreport.Table(os.Stdout, results); err != nil {
		return err
	}
	if b.Only != nil {
		return nil // a partial run: the table above, no report
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	f, err := os.Create(filepath.Join(*out, "benchmarks.md"))
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	defer f.Close()
	if err := benchreport.Render(f, r); err != nil {
		return err
	}
	if err := benchreport.WritePlots(*out, r); err != nil {
		return err
	}
	fmt.Printf("wrote %s and its plots in %s\n", f.Name(), time.Since(started).Round(time.Second))
	return f.Close()
}

// startKruise starts kruise-manager in the background, since it takes about a minute to set
// itself up, and returns what waits for it: its PID, or why it does not run.
func startKruise(ctx context.Context, c *cluster.Cluster) func() (int, error) {
	type started struct {
		pid int
		err error
	}
	done := make(chan started, 1)
	go func() {
		k, err := c.StartKruise(ctx)
		if err != nil {
			done <- started{err: fmt.Errorf("kruise-manager %s did not start here: %w", cluster.KruiseVersion, err)}
			return
		}
		done <- started{pid: k.PID()}
	}()
	var (
		once   sync.Once
		result started
	)
	return func() (int, error) {
		once.Do(func() { result = <-done })
		return result.pid, result.err
	}
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
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building a client: %w", err)
	}
	return benchreport.Floor(ctx, client, spec)
}
