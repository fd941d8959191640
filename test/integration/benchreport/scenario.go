package benchreport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The images each rollout goes between; the simulated kubelet runs any image on
// registry.example.
const (
	imageV1 = "registry.example/app:v1"
	imageV2 = "registry.example/app:v2"
	imageV3 = "registry.example/app:v3"
	imageV4 = "registry.example/app:v4"
)

// Bench runs the scenarios on one control plane.
type Bench struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Kubeconfig is an admin kubeconfig file, for the commands it starts.
	Kubeconfig string
	// CLI is the inplace-rollout binary.
	CLI string
	// FloorCommand starts the floor loop as its own process, so that its CPU time and memory
	// are measured as the CLI's are; Floor's flags are appended (see FloorArgs).
	FloorCommand []string
	// ControllerManagerPID and APIServerPID are those processes' IDs.
	ControllerManagerPID, APIServerPID int
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
	// written.
	ProfileFile string
	// Only, when not empty, limits the run to these approaches (the StatefulSet's rollouts
	// still run in their order: inplace-rollout, then the floor, then its own).
	Only map[Approach]bool
	// LogDir, when set, keeps each command's output there, as APPROACH-PODS.log.
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

// Run measures every approach at each size, in increasing order of size, the CloneSet last, and
// returns the results. A failed rollout stops the run with an error naming it.
func (b *Bench) Run(ctx context.Context, sizes []int) ([]Result, error) {
	var runs []*sizeRun
	for i, n := range sizes {
		s, err := b.newSizeRun(ctx, n, i == len(sizes)-1)
		if err != nil {
			return nil, err
		}
		runs = append(runs, s)
	}
	collect := func() []Result {
		var out []Result
		for _, s := range runs {
			out = append(out, s.out...)
		}
		return out
	}
	for _, s := range runs {
		for _, run := range []func(context.Context) error{s.statefulSet, s.deployment} {
			if err := run(ctx); err != nil {
				return collect(), fmt.Errorf("%d pods: %w", s.n, err)
			}
		}
	}
	err := b.cloneSets(ctx, runs)
	return collect(), err
}

// cloneSets starts kruise-manager, measures the CloneSet at each size and stops it.
func (b *Bench) cloneSets(ctx context.Context, runs []*sizeRun) (err error) {
	if b.StartKruise == nil || (len(b.Only) > 0 && !b.Only[CloneSetInPlace]) {
		return nil
	}
	pid, stop, err := b.StartKruise(ctx)
	if err != nil {
		b.KruiseSkipped = err.Error()
		b.Log.Warn("no CloneSet rollout", "err", err)
		return nil
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("stopping kruise-manager: %w", serr)
		}
	}()
	for _, s := range runs {
		if err := s.cloneSet(ctx, pid); err != nil {
			return fmt.Errorf("%d pods: %w", s.n, err)
		}
	}
	return nil
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
	return &sizeRun{Bench: b, w: w, ns: ns, n: n, largest: largest}, nil
}

// sizeRun is the rollouts of one size, in a namespace of their own.
type sizeRun struct {
	*Bench
	w       *podWatch
	ns      string
	n       int
	largest bool
	out     []Result
}

func (s *sizeRun) want(a Approach) bool { return len(s.Only) == 0 || s.Only[a] }

func (s *sizeRun) add(r Result, err error) error {
	if err != nil {
		return err
	}
	s.Log.Info("measured", "approach", r.Approach, "pods", r.Pods, "wall", r.Wall.Round(time.Millisecond),
		"podWritesPerPod", float64(r.PodWrites)/float64(r.Pods), "driverCPU", r.DriverCPU, "recreated", r.Recreated)
	s.out = append(s.out, r)
	return nil
}

// statefulSet runs three rollouts on one StatefulSet: inplace-rollout's, the floor's, then the
// StatefulSet controller's own.
func (s *sizeRun) statefulSet(ctx context.Context) error {
	if !s.want(InPlace) && !s.want(FloorLoop) && !s.want(StatefulSetRolling) {
		return nil
	}
	const sts = "sts"
	if err := s.createStatefulSet(ctx, s.ns, sts, s.n); err != nil {
		return err
	}
	if err := s.w.waitAllOn(ctx, sts, s.n, imageV1, s.Timeout); err != nil {
		return fmt.Errorf("creating StatefulSet %s/%s: %w", s.ns, sts, err)
	}
	if s.want(InPlace) {
		if err := s.add(s.measure(ctx, s.w, InPlace, sts, s.n, imageV2, func() (string, procUsage, error) {
			return s.runCLI(ctx, s.ns, sts, imageV2, s.largest)
		})); err != nil {
			return err
		}
	}
	// The floor patches pods behind the StatefulSet's back: OnDelete keeps its controller out.
	if err := s.patch(ctx, s.ns, "statefulsets", sts, `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`); err != nil {
		return err
	}
	if s.want(FloorLoop) {
		spec := FloorSpec{Namespace: s.ns, App: sts, Container: "app", Image: imageV3, Batches: batchCounts(s.n)}
		if err := s.add(s.measure(ctx, s.w, FloorLoop, sts, s.n, imageV3, func() (string, procUsage, error) {
			return s.runFloor(ctx, spec)
		})); err != nil {
			return err
		}
	}
	if !s.want(StatefulSetRolling) {
		return nil
	}
	return s.add(s.measure(ctx, s.w, StatefulSetRolling, sts, s.n, imageV4, func() (string, procUsage, error) {
		return s.byController(ctx, s.w, s.ControllerManagerPID, "kube-controller-manager", sts, s.n, imageV4, func() error {
			return s.patch(ctx, s.ns, "statefulsets", sts, `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"10%"}},`+
				`"template":{"spec":{"containers":[{"name":"app","image":"`+imageV4+`"}]}}}}`)
		})
	}))
}

// deployment runs the Deployment controller's rolling update.
func (s *sizeRun) deployment(ctx context.Context) error {
	if !s.want(DeploymentRolling) {
		return nil
	}
	const deploy = "deploy"
	if err := s.createDeployment(ctx, s.ns, deploy, s.n); err != nil {
		return err
	}
	if err := s.w.waitAllOn(ctx, deploy, s.n, imageV1, s.Timeout); err != nil {
		return fmt.Errorf("creating Deployment %s/%s: %w", s.ns, deploy, err)
	}
	return s.add(s.measure(ctx, s.w, DeploymentRolling, deploy, s.n, imageV2, func() (string, procUsage, error) {
		return s.byController(ctx, s.w, s.ControllerManagerPID, "kube-controller-manager", deploy, s.n, imageV2, func() error {
			return s.patch(ctx, s.ns, "deployments", deploy, `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+imageV2+`"}]}}}}`)
		})
	}))
}

// cloneSet runs OpenKruise's CloneSet in-place update by kruise-manager, process pid.
func (s *sizeRun) cloneSet(ctx context.Context, pid int) error {
	const cs = "cloneset"
	if err := s.createCloneSet(ctx, s.ns, cs, s.n); err != nil {
		return err
	}
	if err := s.w.waitAllOn(ctx, cs, s.n, imageV1, s.Timeout); err != nil {
		return fmt.Errorf("creating CloneSet %s/%s: %w", s.ns, cs, err)
	}
	return s.add(s.measure(ctx, s.w, CloneSetInPlace, cs, s.n, imageV2, func() (string, procUsage, error) {
		return s.byController(ctx, s.w, pid, "kruise-manager", cs, s.n, imageV2, func() error {
			_, err := s.Dynamic.Resource(cloneSets).Namespace(s.ns).Patch(ctx, cs, types.MergePatchType,
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"`+imageV2+`"}]}}}}`), metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("patching CloneSet %s/%s: %w", s.ns, cs, err)
			}
			return nil
		})
	}))
}

// settle is how long the control plane is left alone before a measurement, so that the status
// writes of what came before are not counted.
const settle = 2 * time.Second

// measure runs one rollout of the n pods app=app to image and takes its numbers.
func (b *Bench) measure(ctx context.Context, w *podWatch, a Approach, app string, n int, image string, rollout func() (string, procUsage, error)) (Result, error) {
	time.Sleep(settle)
	before := w.uids(app)
	api0, err := readAPICounts(ctx, b.Client)
	if err != nil {
		return Result{}, err
	}
	srv0, err := readProc(b.APIServerPID)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	driver, usage, err := rollout()
	wall := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", a, err)
	}
	// Every approach is done only when every pod runs the image; the command and the loop
	// wait for that themselves.
	if err := w.waitAllOn(ctx, app, n, image, 10*time.Second); err != nil {
		return Result{}, fmt.Errorf("%s finished, but: %w", a, err)
	}
	api1, err := readAPICounts(ctx, b.Client)
	if err != nil {
		return Result{}, err
	}
	srv1, err := readProc(b.APIServerPID)
	if err != nil {
		return Result{}, err
	}
	d := api1.sub(api0)
	r := Result{Approach: a, Pods: n, Limits: b.Limits, Wall: wall, PodWrites: d.podWrites, Writes: d.writes, Requests: d.requests,
		Driver: driver, DriverCPU: usage.cpuSeconds, DriverPeakRSSKiB: usage.peakRSSKiB, APIServerCPU: srv1.cpuSeconds - srv0.cpuSeconds}
	for uid := range w.uids(app) {
		if !before[uid] {
			r.Recreated++
		}
	}
	return r, nil
}

// runCLI rolls the StatefulSet out in place with inplace-rollout in 10 batches of 10%.
func (b *Bench) runCLI(ctx context.Context, ns, name, image string, profile bool) (string, procUsage, error) {
	args := []string{"run", "-n", ns, "--target", "statefulset/" + name, "--image", "app=" + image,
		"--batches", "10%,20%,30%,40%,50%,60%,70%,80%,90%,100%", "--max-unavailable", "10%"}
	if b.ClientQPS > 0 && b.ClientBurst > 0 {
		args = append(args, "--kube-api-qps", strconv.FormatFloat(b.ClientQPS, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(b.ClientBurst))
	}
	if profile && b.ProfileFile != "" {
		args = append(args, "--profile", "cpu", "--profile-output", b.ProfileFile)
	}
	cmd := exec.CommandContext(ctx, b.CLI, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.Kubeconfig)
	u, err := b.runMeasured(cmd, fmt.Sprintf("%s-%s", InPlace, ns))
	return "inplace-rollout run", u, err
}

// runFloor runs the floor loop as its own process.
func (b *Bench) runFloor(ctx context.Context, spec FloorSpec) (string, procUsage, error) {
	argv := append(append([]string(nil), b.FloorCommand...), FloorArgs(b.Kubeconfig, spec)...)
	u, err := b.runMeasured(exec.CommandContext(ctx, argv[0], argv[1:]...), fmt.Sprintf("%s-%s", FloorLoop, spec.Namespace))
	return "floor loop", u, err
}

// runMeasured runs cmd and returns its CPU time and peak resident set.
func (b *Bench) runMeasured(cmd *exec.Cmd, name string) (procUsage, error) {
	out, err := cmd.CombinedOutput()
	if b.LogDir != "" {
		if werr := os.WriteFile(filepath.Join(b.LogDir, name+".log"), out, 0o644); werr != nil {
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
	return procUsage{cpuSeconds: cpu.Seconds(), peakRSSKiB: int(ru.Maxrss)}, nil
}

// byController starts a controller's rollout with one write and waits until every pod runs
// the image, counting the controller's CPU time and peak resident set meanwhile.
func (b *Bench) byController(ctx context.Context, w *podWatch, pid int, name, app string, n int, image string, write func() error) (string, procUsage, error) {
	if err := resetPeakRSS(pid); err != nil {
		return name, procUsage{}, err
	}
	u0, err := readProc(pid)
	if err != nil {
		return name, procUsage{}, err
	}
	if err := write(); err != nil {
		return name, procUsage{}, err
	}
	if err := w.waitAllOn(ctx, app, n, image, b.Timeout); err != nil {
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

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}},
	}
}

func (b *Bench) createStatefulSet(ctx context.Context, ns, name string, n int) error {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(n)), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
		},
	}
	if _, err := b.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StatefulSet %s/%s: %w", ns, name, err)
	}
	return nil
}

func (b *Bench) createDeployment(ctx context.Context, ns, name string, n int) error {
	tenPercent := intstr.FromString("10%")
	zero := intstr.FromInt32(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &tenPercent, MaxSurge: &zero}},
		},
	}
	if _, err := b.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Deployment %s/%s: %w", ns, name, err)
	}
	return nil
}

// cloneSets is OpenKruise's CloneSet resource.
var cloneSets = schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"}

func (b *Bench) createCloneSet(ctx context.Context, ns, name string, n int) error {
	cs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.kruise.io/v1alpha1",
		"kind":       "CloneSet",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		// Every field its controller reads is set: no defaulting webhook runs here.
		"spec": map[string]any{
			"replicas":             int64(n),
			"revisionHistoryLimit": int64(10),
			"scaleStrategy":        map[string]any{},
			"selector":             map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": imageV1}}},
			},
			"updateStrategy": map[string]any{"type": "InPlaceIfPossible", "partition": int64(0), "maxUnavailable": "10%", "maxSurge": int64(0)},
		},
	}}
	if _, err := b.Dynamic.Resource(cloneSets).Namespace(ns).Create(ctx, cs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CloneSet %s/%s: %w", ns, name, err)
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
