package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclientset "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	steprpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/plugin"
	"github.com/inplace-rollout/inplace-rollout/plugin/step"
	"github.com/inplace-rollout/inplace-rollout/test/integration/benchstat"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/procstat"
)

// The shape of the concurrent and side-by-side benchmarks: how many rollouts of how many pods,
// and how many times the side-by-side one repeats each path. The environment variables override
// the defaults, for a small run.
const (
	rolloutsEnv     = "INPLACE_ROLLOUT_BENCH_ROLLOUTS"
	podsEnv         = "INPLACE_ROLLOUT_BENCH_PODS"
	repeatsEnv      = "INPLACE_ROLLOUT_BENCH_REPEATS"
	defaultRollouts = 50
	defaultPods     = 20
	defaultRepeats  = 3
)

const (
	// concurrentCallEvery paces each Rollout's Run calls in the concurrent benchmark. Argo calls
	// a Rollout's step again at the RequeueAfter Run returns (11 s, 16 s with its backoff) and
	// on changes of the Rollout; a second bounds how late a success is seen to a second, at N
	// calls a second to the plugin process, more than Argo's N/16.
	concurrentCallEvery = time.Second
	// concurrentBound is how long the concurrent rollouts may take before the benchmark gives
	// up: a bound on a stuck rollout, not a measurement.
	concurrentBound = 30 * time.Minute
	// targetsReady bounds the creation of the benchmarks' StatefulSets.
	targetsReady = 15 * time.Minute
)

// benchBatches are the batches of every rollout of these benchmarks, as BenchmarkArgoStepRun's:
// ten of a tenth each, a tenth of the pods down at once, a second's soak after each.
var benchBatches = []string{"10%", "20%", "30%", "40%", "50%", "60%", "70%", "80%", "90%", "100%"}

// argoCRDs installs Argo Rollouts' CRDs once per run of the package: the plugin process lists
// and watches Rollouts, as it does beside Argo's controller, and finds the benchmarks' there.
var argoCRDs = sync.OnceValue(func() error { return env.InstallArgoCRDs(context.Background()) })

// BenchmarkArgoConcurrentRollouts rolls N StatefulSets of P pods each (Template pods: an app
// container and a sidecar) out at once through one step plugin process: the inplace-rollout
// binary started by go-plugin as Argo's controller starts it (Argo's handshake, the admin
// kubeconfig, plugin.ClientQPS and ClientBurst, its /metrics on a loopback port), serving every
// Rollout as Argo's one plugin process does. Each Rollout exists in the cluster and its Run is
// called every concurrentCallEvery with the status its last Run returned, until its step ended.
// N and P are $INPLACE_ROLLOUT_BENCH_ROLLOUTS and $INPLACE_ROLLOUT_BENCH_PODS (default 50 and 20).
// It reports the wall time to the last success, the plugin process's CPU over the rollouts, its
// peak RSS over them and its RSS at the end (/proc), its goroutines before and after
// (go_goroutines of its /metrics), the rollouts' p50 and slowest duration (first Run to the
// Successful one) and the Run calls made; it fails unless every rollout succeeded.
func BenchmarkArgoConcurrentRollouts(b *testing.B) {
	n, pods := benchstat.EnvCount(b, rolloutsEnv, defaultRollouts), benchstat.EnvCount(b, podsEnv, defaultPods)
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("web-%02d", i)
		}
		clitest.CreateStatefulSets(b, env, ns, names, int32(pods), targetsReady)
		ros, configs := make([]*argov1alpha1.Rollout, n), make([]json.RawMessage, n)
		for i, name := range names {
			configs[i] = stepConfig(b, name, clitest.AppV2)
			ros[i] = createRollout(b, ns, name, configs[i])
		}
		sp := startStepPlugin(b)
		before, goroutinesBefore := sp.usage(b), sp.goroutines(b)
		if err := procstat.ResetPeak(sp.pid); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		runs := make([]stepRun, n)
		var wg sync.WaitGroup
		for i := range ros {
			wg.Go(func() { runs[i] = driveStep(sp, ros[i], configs[i], concurrentCallEvery, concurrentBound) })
		}
		wg.Wait()
		wall := time.Since(start)
		b.StopTimer()
		after, goroutinesAfter := sp.usage(b), sp.goroutines(b)

		var failed []string
		durations, calls := make([]time.Duration, 0, n), 0
		for i, r := range runs {
			calls += r.calls
			durations = append(durations, r.took)
			if r.res.Phase != types.PhaseSuccessful {
				failed = append(failed, fmt.Sprintf("%s: %s after %s: %s", names[i], r.res.Phase, r.took.Round(time.Second), r.res.Message))
			} else if err := clitest.CheckRolledOut(env, ns, names[i], clitest.AppV2); err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) > 0 {
			b.Fatalf("%d of %d concurrent rollouts did not succeed:\n%s", len(failed), n, strings.Join(failed, "\n"))
		}
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric((after.CPU - before.CPU).Seconds(), "plugin-cpu-s")
		b.ReportMetric(benchstat.MiB(after.PeakRSS), "plugin-peak-rss-MiB")
		b.ReportMetric(benchstat.MiB(after.RSS), "plugin-rss-MiB")
		reportGoroutines(b, "plugin", goroutinesBefore, goroutinesAfter)
		b.ReportMetric(benchstat.Percentile(durations, 50).Seconds(), "rollout-p50-s")
		b.ReportMetric(slices.Max(durations).Seconds(), "rollout-max-s")
		b.ReportMetric(float64(calls), "run-calls")
		b.Logf("%d concurrent rollouts of %d pods through one step plugin process: the last succeeded after %s; the process used %s of CPU, peaked at %.0f MiB RSS",
			n, pods, wall.Round(10*time.Millisecond), after.CPU-before.CPU, benchstat.MiB(after.PeakRSS))
		benchstat.AppendSection(b, fmt.Sprintf("%d concurrent rollouts through one Argo step plugin process", n),
			fmt.Sprintf("%d Rollouts, each of a StatefulSet of %d pods (an app container and a sidecar), all succeeded through one "+
				"step plugin process (the inplace-rollout binary as Argo's controller starts it, at its API rate limit, %d requests/s, "+
				"burst %d), its Run called every %s per Rollout; 10 batches of a tenth, a tenth down at once, a second's soak.",
				n, pods, plugin.ClientQPS, plugin.ClientBurst, concurrentCallEvery),
			[][2]string{
				{"wall time to the last success (s)", fmt.Sprintf("%.1f", wall.Seconds())},
				{"a rollout, first Run to success, p50 / slowest (s)", fmt.Sprintf("%.1f / %.1f", benchstat.Percentile(durations, 50).Seconds(), slices.Max(durations).Seconds())},
				{"the plugin process's CPU over the rollouts (s)", fmt.Sprintf("%.1f", (after.CPU - before.CPU).Seconds())},
				{"its peak RSS over them, its RSS at the end (MiB)", fmt.Sprintf("%.0f, %.0f", benchstat.MiB(after.PeakRSS), benchstat.MiB(after.RSS))},
				{"its goroutines before and after", fmt.Sprintf("%d, %d", goroutinesBefore, goroutinesAfter)},
				{"Run calls", strconv.Itoa(calls)},
			})
	}
}

// BenchmarkArgoBesideCLI rolls one StatefulSet of N×P pods (the concurrent benchmark's pods, in
// one workload) out through the CLI and through the step plugin process, alternately, R times
// each ($INPLACE_ROLLOUT_BENCH_REPEATS, default 3), each path first in every other repeat, each
// rollout to the other image than the last. Both paths run the same rollout (benchBatches, a
// tenth down, a second's soak) at the same API rate limit, the plugin's (plugin.ClientQPS and
// ClientBurst), which bounds every request of each, Events included (the CLI's two clients share
// one limiter). The CLI's time is its process's, from start
// to exit; the plugin's from the first Run to the Successful one, Run called every callEvery as
// BenchmarkArgoStepRun calls it. It reports each path's median wall time and its range.
func BenchmarkArgoBesideCLI(b *testing.B) {
	total := benchstat.EnvCount(b, rolloutsEnv, defaultRollouts) * benchstat.EnvCount(b, podsEnv, defaultPods)
	repeats := benchstat.EnvCount(b, repeatsEnv, defaultRepeats)
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		clitest.CreateStatefulSets(b, env, ns, []string{argoTarget}, int32(total), targetsReady)
		ro := createRollout(b, ns, argoTarget, stepConfig(b, argoTarget, clitest.AppV2))
		sp := startStepPlugin(b)
		b.StartTimer()

		image := clitest.AppV1
		var cliWall, pluginWall []time.Duration
		for i := range repeats {
			paths := []string{"cli", "plugin"}
			if i%2 == 1 {
				slices.Reverse(paths)
			}
			for _, path := range paths {
				image = map[string]string{clitest.AppV1: clitest.AppV2, clitest.AppV2: clitest.AppV1}[image]
				if path == "cli" {
					cliWall = append(cliWall, rollOutByCLI(b, ns, image))
				} else {
					pluginWall = append(pluginWall, rollOutByPlugin(b, sp, ro, image))
				}
				if err := clitest.CheckRolledOut(env, ns, argoTarget, image); err != nil {
					b.Fatalf("after the %s's rollout %d: %v", path, i+1, err)
				}
			}
		}
		b.StopTimer()
		c, p := benchstat.Of(benchstat.Seconds(cliWall)), benchstat.Of(benchstat.Seconds(pluginWall))
		b.ReportMetric(c.Median, "cli-wall-s")
		b.ReportMetric(c.Min, "cli-wall-min-s")
		b.ReportMetric(c.Max, "cli-wall-max-s")
		b.ReportMetric(p.Median, "plugin-wall-s")
		b.ReportMetric(p.Min, "plugin-wall-min-s")
		b.ReportMetric(p.Max, "plugin-wall-max-s")
		b.Logf("one StatefulSet of %d pods, %d rollouts by each path: the CLI %s s, the step plugin process %s s (median, range)",
			total, repeats, c.Cell(2), p.Cell(2))
		benchstat.AppendSection(b, "The Argo path beside the CLI's",
			fmt.Sprintf("One StatefulSet of %d pods rolled out %d times by each path, alternately: the CLI (its run, start to exit) and the "+
				"step plugin process (first Run to the Successful one, Run called every %s), both at the plugin's API rate limit "+
				"(%d requests/s, burst %d); 10 batches of a tenth, a tenth down at once, a second's soak. Median (range).",
				total, repeats, callEvery, plugin.ClientQPS, plugin.ClientBurst),
			[][2]string{{"the CLI (s)", c.Cell(2)}, {"the step plugin process (s)", p.Cell(2)}})
	}
}

// rollOutByCLI runs `inplace-rollout run` of the benchmark's rollout of StatefulSet web to image
// at the plugin's API rate limit, and returns how long the command ran.
func rollOutByCLI(b *testing.B, ns, image string) time.Duration {
	b.Helper()
	start := time.Now()
	r := clitest.Run(b, env, cli, "run", "-n", ns, "--target", "statefulset/"+argoTarget, "--image", "app="+image,
		"--batches", strings.Join(benchBatches, ","), "--max-unavailable", "10%", "--soak", "1s",
		"--kube-api-qps", strconv.FormatFloat(plugin.ClientQPS, 'f', -1, 32), "--kube-api-burst", strconv.Itoa(plugin.ClientBurst))
	took := time.Since(start)
	if r.Code != 0 {
		b.Fatalf("inplace-rollout run to %s: %s", image, r)
	}
	return took
}

// rollOutByPlugin runs the step of Rollout ro, changed to image, through sp from a fresh step
// status, as Argo does at a new revision, and returns how long it took.
func rollOutByPlugin(b *testing.B, sp steprpc.StepPlugin, ro *argov1alpha1.Rollout, image string) time.Duration {
	b.Helper()
	ro = ro.DeepCopy()
	ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: image}}
	r := driveStep(sp, ro, stepConfig(b, argoTarget, image), callEvery, phaseBound)
	if r.res.Phase != types.PhaseSuccessful {
		b.Fatalf("the step to %s ended %s after %s: %s", image, r.res.Phase, r.took.Round(time.Second), r.res.Message)
	}
	return r.took
}

// stepRun is one step's calls, from its first Run to the one that ended it.
type stepRun struct {
	took           time.Duration
	calls, retried int
	res            types.RpcStepResult
}

// driveStep calls sp.Run for ro as Argo's controller does: every `every`, with the status the
// last Run returned, an RpcError retried, until the step ends or bound passes (the step still
// Running then). It is safe to call at once for many Rollouts: Argo's workers call one plugin
// process concurrently.
func driveStep(sp steprpc.StepPlugin, ro *argov1alpha1.Rollout, config json.RawMessage, every, bound time.Duration) stepRun {
	var (
		run    stepRun
		status json.RawMessage
		start  = time.Now()
	)
	for {
		r, rpcErr := sp.Run(ro, &types.RpcStepContext{PluginName: step.Name, Config: config, Status: status})
		run.calls++
		if rpcErr.HasError() {
			run.retried++
		} else {
			run.res, status = r, r.Status
			if r.Phase != types.PhaseRunning {
				break
			}
		}
		if time.Since(start) > bound {
			run.res.Message = fmt.Sprintf("still running after %s: %s %s", bound, run.res.Message, rpcErr.ErrorString)
			break
		}
		time.Sleep(every)
	}
	run.took = time.Since(start)
	return run
}

// stepConfig is the benchmarks' step config: a rollout of StatefulSet target's app container to
// image in benchBatches.
func stepConfig(b *testing.B, target, image string) json.RawMessage {
	return mustJSON(b, map[string]any{
		"target":         map[string]any{"kind": "StatefulSet", "name": target},
		"images":         map[string]any{"app": image},
		"batches":        benchBatches,
		"maxUnavailable": "10%",
		"soak":           "1s",
	})
}

// createRollout creates the Rollout ns/name whose one canary step is this plugin's with config,
// and returns it as Argo passes it to Run mid-revision (argoRollout): with the UID the cluster
// gave it, which the plugin's scan matches against the lock's holder.
func createRollout(b *testing.B, ns, name string, config json.RawMessage) *argov1alpha1.Rollout {
	b.Helper()
	if err := argoCRDs(); err != nil {
		b.Fatalf("installing Argo Rollouts' CRDs: %v", err)
	}
	client, err := argoclientset.NewForConfig(env.Config)
	if err != nil {
		b.Fatalf("building an Argo Rollouts client: %v", err)
	}
	ro := argoRollout(ns, hashV1, hashV2)
	ro.Name = name
	ro.Spec.Strategy.Canary = &argov1alpha1.CanaryStrategy{Steps: []argov1alpha1.CanaryStep{
		{Plugin: &argov1alpha1.PluginStep{Name: step.Name, Config: config}}}}
	status := ro.Status
	created, err := client.ArgoprojV1alpha1().Rollouts(ns).Create(context.Background(), ro, metav1.CreateOptions{})
	if err != nil {
		b.Fatalf("creating Rollout %s/%s: %v", ns, name, err)
	}
	created.Status = status
	return created
}

// stepPlugin is a step plugin process as Argo's controller runs it, and the controller's side
// of its RPC.
type stepPlugin struct {
	steprpc.StepPlugin
	pid int
	// metricsURL is its Prometheus /metrics.
	metricsURL string
}

// startStepPlugin starts the inplace-rollout binary as Argo's controller starts its step plugin
// (go-plugin, Argo's handshake, the controller's environment) on the cluster's admin
// kubeconfig, with its metrics on a free loopback port, and initializes it. The benchmark's end
// stops it; when the benchmark failed, the end of its log is logged.
func startStepPlugin(b *testing.B) *stepPlugin {
	b.Helper()
	addr := freeLoopbackAddr(b)
	logPath := filepath.Join(b.TempDir(), "step-plugin.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(cli)
	// Last, so that they win over the same names in this process's environment.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "INPLACE_ROLLOUT_METRICS_ADDR="+addr)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: step.Handshake, Plugins: step.PluginMap(nil), Cmd: cmd, SkipHostEnv: true,
		Logger: hclog.NewNullLogger(), Stderr: logFile,
	})
	b.Cleanup(func() {
		client.Kill()
		_ = logFile.Close()
		if b.Failed() {
			data, _ := os.ReadFile(logPath)
			b.Logf("the step plugin process's log ends:\n%s", clitest.LastLines(string(data), 30))
		}
	})
	rpcClient, err := client.Client()
	if err != nil {
		b.Fatalf("starting the step plugin process %s: %v", cli, err)
	}
	raw, err := rpcClient.Dispense("RpcStepPlugin")
	if err != nil {
		b.Fatalf("dispensing the step plugin: %v", err)
	}
	sp, ok := raw.(steprpc.StepPlugin)
	if !ok {
		b.Fatalf("dispensed %T, want a step plugin", raw)
	}
	if err := sp.InitPlugin(); err.HasError() {
		b.Fatalf("InitPlugin: %s", err.ErrorString)
	}
	return &stepPlugin{StepPlugin: sp, pid: cmd.Process.Pid, metricsURL: "http://" + addr + "/metrics"}
}

func (p *stepPlugin) usage(b *testing.B) procstat.Usage {
	b.Helper()
	u, err := procstat.Read(p.pid)
	if err != nil {
		b.Fatalf("the step plugin process: %v", err)
	}
	return u
}

// goroutines is the process's go_goroutines, or -1 (logged) when its /metrics cannot be read:
// the plugin serves none when it cannot listen on its address.
func (p *stepPlugin) goroutines(b *testing.B) int {
	b.Helper()
	n, err := procstat.Goroutines(p.metricsURL)
	if err != nil {
		b.Logf("the step plugin process's goroutines are not reported: %v", err)
		return -1
	}
	return n
}

// reportGoroutines reports a process's goroutines before and after the rollouts, unless either
// could not be read.
func reportGoroutines(b *testing.B, who string, before, after int) {
	b.Helper()
	if before < 0 || after < 0 {
		return
	}
	b.ReportMetric(float64(before), who+"-goroutines-before")
	b.ReportMetric(float64(after), who+"-goroutines-after")
}

// freeLoopbackAddr is a loopback address whose port was free a moment ago.
func freeLoopbackAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
