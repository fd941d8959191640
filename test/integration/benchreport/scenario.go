package benchreport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/inplace-rollout/inplace-rollout/test/integration/procstat"
)

// imageV1 is what every workload starts on; each rollout then moves a workload to its next
// version (image). The simulated kubelet runs any image on registry.example.
const imageV1 = "registry.example/app:v1"

func image(version int) string { return fmt.Sprintf("registry.example/app:v%d", version) }

// Bench runs the scenarios on one control plane.
type Bench struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Config is an admin rest.Config, for the clients the bench builds of its own (the gate
	// controller's).
	Config *rest.Config
	// Kubeconfig is an admin kubeconfig file, for the commands it starts.
	Kubeconfig string
	// CLI is the inplace-rollout binary.
	CLI string
	// FloorCommand starts the floor loop as its own process, so that its CPU time and memory
	// are measured as the CLI's are; Floor's flags are appended (see FloorArgs).
	FloorCommand []string
	// ControllerManagerPID, APIServerPID and EtcdPID are those processes' IDs.
	ControllerManagerPID, APIServerPID, EtcdPID int
	// AuditLog, when set, is kube-apiserver's audit log of every request, which the bench
	// truncates before each rollout and reads after (cluster.Options.AuditEveryone).
	AuditLog string
	// Serving, when set, says whether a pod would answer a request now (the simulated kubelet's
	// kubeletsim.Simulator.Serving): every rollout then runs under a request load on its
	// workload's Service (startLoad), and its result counts the requests that failed.
	Serving func(types.UID) bool
	// kruisePID is kruise-manager's process ID while it runs.
	kruisePID int
	// StartKruise starts kruise-manager, returning once it is ready to measure (its set-up
	// ended), with its process ID and what stops it; nil leaves the CloneSet out. Run starts
	// it after the other approaches' rollouts and stops it after the CloneSet's, so that it
	// runs during no other rollout.
	StartKruise func(ctx context.Context) (pid int, stop func() error, err error)
	// KruiseSkipped says why the CloneSet rows are missing, once Run found that
	// kruise-manager does not start here.
	KruiseSkipped string
	// Limits are the rate limits the control plane's controllers and the commands run at,
	// recorded in each result.
	Limits Limits
	// ClientQPS and ClientBurst, when set, are inplace-rollout's rate limit
	// (--kube-api-qps, --kube-api-burst); FloorCommand sets the floor loop's.
	ClientQPS   float64
	ClientBurst int
	// ProfileFile, when set, is where the CPU profile of inplace-rollout at the largest size is
	// written, by one more rollout after the repetitions, left out of the results.
	ProfileFile string
	// Repetitions is how many times each approach is measured at each size (0: once). Each
	// repetition measures every approach at every size once, kruise-manager's CloneSet last;
	// the others in an order shuffled for each repetition and size from Seed.
	Repetitions int
	Seed        uint64
	// Approaches, when not empty, are the approaches this control plane measures.
	Approaches []Approach
	// Only, when not empty, limits the run further to these approaches.
	Only map[Approach]bool
	// LogDir, when set, keeps each command's output there, as LIMITS-APP-NAMESPACE-VERSION.log.
	LogDir string
	// Timeout bounds each rollout.
	Timeout time.Duration
	Log     *slog.Logger
}

// batchCounts are the cumulative pod counts of 10 batches of 10% of n, as inplace-rollout
// counts --batches 10%,20%,...,100%: each rounded up.
func batchCounts(n int) []int {
	out := make([]int, 10)
	for i := range out {
		out[i] = (n*(i+1)*10 + 99) / 100
	}
	return out
}

// FloorArgs are the arguments of the floor command for spec, parsed back by ParseFloorArgs.
func FloorArgs(kubeconfig string, spec FloorSpec) []string {
	counts := make([]string, len(spec.Batches))
	for i, n := range spec.Batches {
		counts[i] = strconv.Itoa(n)
	}
	return []string{"-kubeconfig", kubeconfig, "-namespace", spec.Namespace, "-app", spec.App,
		"-container", spec.Container, "-image", spec.Image, "-batches", strings.Join(counts, ",")}
}

// order is the approaches Run shuffles for each repetition and size; kruise-manager's
// CloneSet comes after all of them, at every size.
var order = []Approach{InPlace, InPlaceGated, InPlaceWindow, FloorLoop, StatefulSetRolling, DeploymentRolling}

// Run measures every approach at each size, Repetitions times, and returns the results. A
// failed rollout stops the run with an error naming it.
func (b *Bench) Run(ctx context.Context, sizes []int) (results []Result, err error) {
	// The gate controllers of the gated StatefulSets run until the run ends.
	ctx, cancel := context.WithCancel(ctx)
	var runs []*sizeRun
	defer func() {
		cancel()
		for _, s := range runs {
			results = append(results, s.out...)
			if gerr := s.stopGate(); gerr != nil && err == nil {
				err = gerr
			}
		}
	}()
	for i, n := range sizes {
		s, err := b.newSizeRun(ctx, n, i == len(sizes)-1)
		if err != nil {
			return nil, err
		}
		runs = append(runs, s)
	}
	reps := max(1, b.Repetitions)
	orders := shuffledOrders(b.Seed, reps, len(runs))
	for rep := 1; rep <= reps; rep++ {
		for i, s := range runs {
			s.rep = rep
			for _, a := range orders[(rep-1)*len(runs)+i] {
				if err := s.run(ctx, a); err != nil {
					return nil, fmt.Errorf("repetition %d, %d pods: %w", rep, s.n, err)
				}
			}
		}
		if err := b.cloneSets(ctx, rep, runs); err != nil {
			return nil, fmt.Errorf("repetition %d: %w", rep, err)
		}
	}
	if b.ProfileFile != "" && b.want(InPlace) {
		return nil, runs[len(runs)-1].profile(ctx)
	}
	return nil, nil
}

// shuffledOrders are the orders of the approaches of each repetition and size, repetition
// after repetition: each a permutation of order, drawn from seed alone, so that a run with the
// same seed, repetitions and sizes measures in the same order.
func shuffledOrders(seed uint64, reps, sizes int) [][]Approach {
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([][]Approach, reps*sizes)
	for i := range out {
		out[i] = slices.Clone(order)
		rng.Shuffle(len(order), func(a, b int) { out[i][a], out[i][b] = out[i][b], out[i][a] })
	}
	return out
}

// cloneSets starts kruise-manager, measures the CloneSet at each size and stops it. When it
// does not start in the first repetition, the CloneSet is left out (KruiseSkipped says why).
func (b *Bench) cloneSets(ctx context.Context, rep int, runs []*sizeRun) (err error) {
	if b.StartKruise == nil || !b.want(CloneSetInPlace) || b.KruiseSkipped != "" {
		return nil
	}
	pid, stop, err := b.StartKruise(ctx)
	b.kruisePID = pid
	defer func() { b.kruisePID = 0 }()
	if err != nil && rep == 1 {
		b.KruiseSkipped = err.Error()
		b.Log.Warn("no CloneSet rollout", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("stopping kruise-manager: %w", serr)
		}
	}()
	for _, s := range runs {
		s.rep = rep
		if err := s.cloneSet(ctx, pid); err != nil {
			return fmt.Errorf("%d pods: %w", s.n, err)
		}
	}
	return nil
}

func (b *Bench) want(a Approach) bool {
	if len(b.Approaches) > 0 && !slices.Contains(b.Approaches, a) {
		return false
	}
	return len(b.Only) == 0 || b.Only[a]
}

func (b *Bench) newSizeRun(ctx context.Context, n int, largest bool) (*sizeRun, error) {
	ns := fmt.Sprintf("bench-%d", n)
	if _, err := b.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	w, err := watchPods(ctx, b.Client, ns)
	if err != nil {
		return nil, err
	}
	return &sizeRun{Bench: b, w: w, ns: ns, n: n, largest: largest, versions: map[string]int{}}, nil
}

// sizeRun is the rollouts of one size, in a namespace of their own: one workload per kind of
// rollout, created at its first, each rollout moving it to its next version.
type sizeRun struct {
	*Bench
	w       *podWatch
	ns      string
	n       int
	largest bool
	// rep is the repetition being measured.
	rep int
	out []Result
	// versions are the image versions the workloads run, by name; a workload not there yet
	// has none.
	versions map[string]int
	// gateDone, once the gated StatefulSet's gate controller runs, gives its end.
	gateDone chan error
}

// The workloads of a size, by the label app of their pods. The in-place rollouts and the
// StatefulSet's own share one StatefulSet, each handing it back as it found it (its update
// strategy, every pod at its revision); the floor loop, which leaves the template behind the
// pods, and the gated pods have their own.
const (
	stsApp      = "sts"
	floorApp    = "floor"
	gatedApp    = "gated"
	deployApp   = "deploy"
	cloneSetApp = "cloneset"
)

// tenBatches are inplace-rollout's batches: 10 of 10% each.
const tenBatches = "10%,20%,30%,40%,50%,60%,70%,80%,90%,100%"

// run measures approach a at this size.
func (s *sizeRun) run(ctx context.Context, a Approach) error {
	if !s.want(a) {
		return nil
	}
	switch a {
	case InPlace:
		return s.inPlace(ctx, a, stsApp, tenBatches)
	case InPlaceGated:
		return s.inPlace(ctx, a, gatedApp, tenBatches)
	case InPlaceWindow:
		return s.inPlace(ctx, a, stsApp, "100%")
	case FloorLoop:
		return s.floor(ctx)
	case StatefulSetRolling:
		return s.statefulSetRolling(ctx)
	case DeploymentRolling:
		return s.deployment(ctx)
	}
	return fmt.Errorf("no rollout of approach %q here", a)
}

// next is the image app's next rollout goes to.
func (s *sizeRun) next(app string) string { return image(s.versions[app] + 1) }

// ensure creates the workload app with create, unless it is there, and waits until its pods
// run on imageV1.
func (s *sizeRun) ensure(ctx context.Context, app string, create func() error) error {
	if s.versions[app] > 0 {
		return nil
	}
	if err := s.createService(ctx, app); err != nil {
		return err
	}
	if err := create(); err != nil {
		return err
	}
	if err := s.w.waitAllOn(ctx, app, s.n, imageV1, s.Timeout); err != nil {
		return fmt.Errorf("creating the %d pods app=%s in %s: %w", s.n, app, s.ns, err)
	}
	if err := s.w.endpoints.waitAllListed(ctx, app, s.n, s.Timeout); err != nil {
		return fmt.Errorf("creating the %d pods app=%s in %s: %w", s.n, app, s.ns, err)
	}
	s.versions[app] = 1
	return nil
}

// add records r, a rollout of the workload app.
func (s *sizeRun) add(app string, r Result) {
	s.versions[app]++
	s.Log.Info("measured", "rep", r.Rep, "approach", r.Approach, "pods", r.Pods, "wall", r.Wall.Round(time.Millisecond),
		"podWritesPerPod", float64(r.PodWrites)/float64(r.Pods), "driverCPU", r.DriverCPU, "recreated", r.Recreated)
	s.out = append(s.out, r)
}

// inPlace runs inplace-rollout on the StatefulSet app in batches, 10% of its pods unavailable
// at most.
func (s *sizeRun) inPlace(ctx context.Context, a Approach, app, batches string) error {
	if err := s.ensure(ctx, app, func() error { return s.createStatefulSet(ctx, app, app == gatedApp) }); err != nil {
		return err
	}
	img := s.next(app)
	return s.measure(ctx, a, app, img, func() (string, procUsage, error) {
		return s.runCLI(ctx, s.ns, app, img, batches, false)
	})
}

// profile runs inplace-rollout's rollout once more, with its CPU profile written to
// ProfileFile, and records nothing of it: the profiler's cost stays out of the results.
func (s *sizeRun) profile(ctx context.Context) error {
	if err := s.ensure(ctx, stsApp, func() error { return s.createStatefulSet(ctx, stsApp, false) }); err != nil {
		return err
	}
	img := s.next(stsApp)
	time.Sleep(settle)
	if _, _, err := s.runCLI(ctx, s.ns, stsApp, img, tenBatches, true); err != nil {
		return fmt.Errorf("the profiled rollout: %w", err)
	}
	if err := s.w.waitAllOn(ctx, stsApp, s.n, img, 10*time.Second); err != nil {
		return fmt.Errorf("the profiled rollout finished, but: %w", err)
	}
	s.versions[stsApp]++
	return nil
}

// floor runs the floor loop on the pods of its StatefulSet, whose OnDelete strategy keeps its
// controller out.
func (s *sizeRun) floor(ctx context.Context) error {
	if err := s.ensure(ctx, floorApp, func() error { return s.createStatefulSet(ctx, floorApp, false) }); err != nil {
		return err
	}
	spec := FloorSpec{Namespace: s.ns, App: floorApp, Container: "app", Image: s.next(floorApp), Batches: batchCounts(s.n)}
	return s.measure(ctx, FloorLoop, floorApp, spec.Image, func() (string, procUsage, error) {
		return s.runFloor(ctx, spec)
	})
}

// statefulSetRolling runs the StatefulSet controller's RollingUpdate, 10% unavailable at most.
func (s *sizeRun) statefulSetRolling(ctx context.Context) error {
	if err := s.ensure(ctx, stsApp, func() error { return s.createStatefulSet(ctx, stsApp, false) }); err != nil {
		return err
	}
	img := s.next(stsApp)
	return s.measure(ctx, StatefulSetRolling, stsApp, img, func() (string, procUsage, error) {
		return s.byController(ctx, s.ControllerManagerPID, "kube-controller-manager", stsApp, s.n, img, func() error {
			return s.patch(ctx, s.ns, "statefulsets", stsApp, `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"10%"}},`+
				`"template":{"spec":{"containers":[{"name":"app","image":"`+img+`"}]}}}}`)
		})
	})
}

// deployment runs the Deployment controller's rolling update.
func (s *sizeRun) deployment(ctx context.Context) error {
	if err := s.ensure(ctx, deployApp, func() error { return s.createDeployment(ctx, deployApp) }); err != nil {
		return err
	}
	img := s.next(deployApp)
	return s.measure(ctx, DeploymentRolling, deployApp, img, func() (string, procUsage, error) {
		return s.byController(ctx, s.ControllerManagerPID, "kube-controller-manager", deployApp, s.n, img, func() error {
			return s.patch(ctx, s.ns, "deployments", deployApp, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+img+`"}]}}}}`)
		})
	})
}

// cloneSet runs OpenKruise's CloneSet in-place update by kruise-manager, process pid.
func (s *sizeRun) cloneSet(ctx context.Context, pid int) error {
	if err := s.ensure(ctx, cloneSetApp, func() error { return s.createCloneSet(ctx, cloneSetApp) }); err != nil {
		return err
	}
	img := s.next(cloneSetApp)
	return s.measure(ctx, CloneSetInPlace, cloneSetApp, img, func() (string, procUsage, error) {
		return s.byController(ctx, pid, "kruise-manager", cloneSetApp, s.n, img, func() error {
			_, err := s.Dynamic.Resource(cloneSets).Namespace(s.ns).Patch(ctx, cloneSetApp, types.MergePatchType,
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+img+`"}]}}}}`), metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("patching CloneSet %s/%s: %w", s.ns, cloneSetApp, err)
			}
			return nil
		})
	})
}

// settle is how long the control plane is left alone before a measurement, so that the status
// writes of what came before are not counted.
const settle = 2 * time.Second

// measure runs one rollout of the pods app=app to image and records its numbers.
func (s *sizeRun) measure(ctx context.Context, a Approach, app, image string, rollout func() (string, procUsage, error)) error {
	r, err := s.measured(ctx, a, app, image, rollout)
	if err != nil {
		return err
	}
	s.add(app, r)
	return nil
}

// measured runs one rollout of the pods app=app to image and takes its numbers.
func (s *sizeRun) measured(ctx context.Context, a Approach, app, image string, rollout func() (string, procUsage, error)) (Result, error) {
	time.Sleep(settle)
	before := s.w.uids(app)
	api0, err := readAPICounts(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	cpu0, err := s.readCPU()
	if err != nil {
		return Result{}, err
	}
	var audit auditWindow
	if s.AuditLog != "" {
		if audit, err = openAuditWindow(s.AuditLog); err != nil {
			return Result{}, err
		}
	}
	var ld *load
	if s.Serving != nil {
		ld = s.w.endpoints.startLoad(ctx, app, s.Serving)
		defer ld.cancel()
	}
	start := time.Now()
	driver, usage, err := rollout()
	wall := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", a, err)
	}
	// Every approach is done only when every pod runs the image; the command and the loop
	// wait for that themselves. What users feel lasts until the Service lists every pod again.
	if err := s.w.waitAllOn(ctx, app, s.n, image, 10*time.Second); err != nil {
		return Result{}, fmt.Errorf("%s finished, but: %w", a, err)
	}
	if err := s.w.endpoints.waitAllListed(ctx, app, s.n, 10*time.Second); err != nil {
		return Result{}, fmt.Errorf("%s finished, but: %w", a, err)
	}
	end := time.Now()
	r := Result{Approach: a, Pods: s.n, Limits: s.Limits, Rep: s.rep, Wall: wall, Driver: driver,
		DriverCPU: usage.cpuSeconds, DriverPeakRSSKiB: usage.peakRSSKiB, DriverPeakRSSMeasured: true}
	if ld != nil {
		r.Sent, r.Failed = ld.stop()
	}
	// A Deployment's new pods have new names: each pod leaving is paired with one coming in.
	paired := a == DeploymentRolling
	r.NotReady = s.w.ready.outTimes(app, start, end, paired)
	r.OutOfSlice = s.w.endpoints.listed.outTimes(app, start, end, paired)
	if s.AuditLog != "" {
		if r.Calls, err = audit.calls(); err != nil {
			return Result{}, err
		}
	}
	cpu1, err := s.readCPU()
	if err != nil {
		return Result{}, err
	}
	api1, err := readAPICounts(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	d := api1.sub(api0)
	r.PodWrites, r.Writes, r.Requests = d.podWrites, d.writes, d.requests
	r.CPU = map[string]float64{}
	for name, c := range cpu1 {
		r.CPU[name] = c - cpu0[name]
	}
	if usage.command {
		r.CPU[CPUCommand] = usage.cpuSeconds
	}
	r.APIServerCPU = r.CPU[CPUAPIServer]
	for uid := range s.w.uids(app) {
		if !before[uid] {
			r.Recreated++
		}
	}
	return r, nil
}

// readCPU reads the CPU time so far of every process of the run that is running.
func (s *sizeRun) readCPU() (map[string]float64, error) {
	pids := map[string]int{CPUAPIServer: s.APIServerPID, CPUEtcd: s.EtcdPID, CPUControllerManager: s.ControllerManagerPID,
		CPUKruise: s.kruisePID, CPUBench: os.Getpid()}
	out := map[string]float64{}
	for name, pid := range pids {
		if pid == 0 {
			continue
		}
		u, err := readProc(pid)
		if err != nil {
			return nil, fmt.Errorf("the CPU time of %s: %w", name, err)
		}
		out[name] = u.cpuSeconds
	}
	return out, nil
}

// runCLI rolls the StatefulSet name out in place with inplace-rollout, in batches, 10% of its
// pods unavailable at most.
func (b *Bench) runCLI(ctx context.Context, ns, name, image, batches string, profile bool) (string, procUsage, error) {
	args := []string{"run", "-n", ns, "--target", "statefulset/" + name, "--image", "app=" + image,
		"--batches", batches, "--max-unavailable", "10%"}
	if b.ClientQPS > 0 && b.ClientBurst > 0 {
		args = append(args, "--kube-api-qps", strconv.FormatFloat(b.ClientQPS, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(b.ClientBurst))
	}
	if profile && b.ProfileFile != "" {
		args = append(args, "--profile", "cpu", "--profile-output", b.ProfileFile)
	}
	cmd := exec.CommandContext(ctx, b.CLI, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.Kubeconfig)
	u, err := b.runMeasured(cmd, fmt.Sprintf("%s-%s-%s", name, ns, image[strings.LastIndexByte(image, ':')+1:]))
	return "inplace-rollout run", u, err
}

// runFloor runs the floor loop as its own process.
func (b *Bench) runFloor(ctx context.Context, spec FloorSpec) (string, procUsage, error) {
	argv := append(append([]string(nil), b.FloorCommand...), FloorArgs(b.Kubeconfig, spec)...)
	u, err := b.runMeasured(exec.CommandContext(ctx, argv[0], argv[1:]...), fmt.Sprintf("%s-%s-%s", FloorLoop, spec.Namespace, spec.Image[strings.LastIndexByte(spec.Image, ':')+1:]))
	return "floor loop", u, err
}

// runMeasured runs cmd and returns its CPU time and peak resident set. The peak is sampled from
// /proc while it runs: the rusage's maxrss of a child started by fork and exec keeps the
// parent's own peak, inherited at exec (the benchmark's, hundreds of MiB).
func (b *Bench) runMeasured(cmd *exec.Cmd, name string) (procUsage, error) {
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Start()
	peak := 0
	if err == nil {
		stop, sampled := make(chan struct{}), make(chan int, 1)
		go func() { sampled <- samplePeakRSS(cmd.Process.Pid, stop) }()
		err = cmd.Wait()
		close(stop)
		peak = <-sampled
	}
	out := buf.Bytes()
	if b.LogDir != "" {
		if werr := os.WriteFile(filepath.Join(b.LogDir, string(b.Limits)+"-"+name+".log"), out, 0o644); werr != nil {
			return procUsage{}, fmt.Errorf("keeping the output of %s: %w", name, werr)
		}
	}
	if err != nil {
		return procUsage{}, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, lastLines(string(out), 20))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return procUsage{}, errors.New("no resource usage for " + cmd.Path)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return procUsage{cpuSeconds: cpu.Seconds(), peakRSSKiB: peak, command: true}, nil
}

// byController starts a controller's rollout with one write and waits until every pod runs
// the image, counting the controller's CPU time and peak resident set meanwhile.
func (s *sizeRun) byController(ctx context.Context, pid int, name, app string, n int, image string, write func() error) (string, procUsage, error) {
	if err := procstat.ResetPeak(pid); err != nil {
		return name, procUsage{}, err
	}
	u0, err := readProc(pid)
	if err != nil {
		return name, procUsage{}, err
	}
	if err := write(); err != nil {
		return name, procUsage{}, err
	}
	if err := s.w.waitAllOn(ctx, app, n, image, s.Timeout); err != nil {
		return name, procUsage{}, err
	}
	u1, err := readProc(pid)
	if err != nil {
		return name, procUsage{}, err
	}
	return name, procUsage{cpuSeconds: u1.cpuSeconds - u0.cpuSeconds, peakRSSKiB: u1.peakRSSKiB}, nil
}

func (b *Bench) patch(ctx context.Context, ns, resource, name, patch string) error {
	var err error
	switch resource {
	case "statefulsets":
		_, err = b.Client.AppsV1().StatefulSets(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	case "deployments":
		_, err = b.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	default:
		err = fmt.Errorf("no patch for %s", resource)
	}
	if err != nil {
		return fmt.Errorf("patching %s %s/%s: %w", resource, ns, name, err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
