package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/gate"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/benchstat"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode/loadgen"
)

// The client rate limit kube-controller-manager runs with in this cluster: its defaults
// (--kube-api-qps=20, --kube-api-burst=30), as cluster.startControllerManager sets neither. The
// CLI gets the same.
const (
	controllerQPS   = "20"
	controllerBurst = "30"
)

// approach is one way of rolling a new image out to the StatefulSet's pods.
type approach struct {
	Name    string
	InPlace bool // the CLI in place; else the StatefulSet controller's RollingUpdate
	PreStop bool // lifecycle.preStop.sleep 2 s on the app container
	// Gated pods declare the readiness gate inplace-rollout.io/ready, which the project's gate
	// controller sets True on new pods; the CLI drains each pod through it, gateGrace before
	// its patch.
	Gated bool
}

var approaches = []approach{
	{"in place (CLI)", true, false, false},
	{"RollingUpdate (recreate)", false, false, false},
	{"in place (CLI), readiness gate", true, false, true},
	{"RollingUpdate (recreate), readiness gate", false, false, true},
	{"in place (CLI), preStop 2 s", true, true, false},
	{"RollingUpdate (recreate), preStop 2 s", false, true, false},
}

// variant is what a StatefulSet's pods declare beyond the template: a preStop hook, or the
// readiness gate. Each variant has a StatefulSet of its own.
type variant struct{ preStop, gated bool }

var variants = []variant{{}, {gated: true}, {preStop: true}}

// gateGrace is the CLI's --grace for gated pods: the time between the drain and the patch, for
// the EndpointSlice to drop the pod and kube-proxy (or the load generator, loadRefresh) to sync.
const gateGrace = "2s"

// The load on the Service during each rollout: loadRPS requests a second, in turn to the pods
// the EndpointSlices listed ready when the load generator last synced, every loadRefresh, as
// kube-proxy syncs at most once a second by default (--iptables-min-sync-period).
const (
	loadRPS     = 200
	loadRefresh = time.Second
)

// rolloutResult is what one rollout measured.
type rolloutResult struct {
	toReady   []time.Duration // per pod: patch (in place) or delete (recreate) to Ready on the new image
	out       []time.Duration // per pod: time out of the Service's EndpointSlice (not ready or absent)
	wall      time.Duration   // the CLI's run, or the template change to every pod Ready on the new image
	recreated int             // pods with a new UID afterwards
	// sent and failed are the load's requests during the rollout, and those with no answer
	// (refused, reset, timed out) or an answer other than 200.
	sent, failed int
}

// BenchmarkRealNode rolls a new image out to the N pods of a StatefulSet on the real node, R
// times per approach, under a request load: in place by the CLI, and recreated by the
// StatefulSet controller's RollingUpdate, on plain pods, on pods with the readiness gate, and on
// pods with a preStop hook (a StatefulSet each); one pod at a time in both, at the controller
// manager's client rate limit. N is INPLACE_ROLLOUT_REAL_NODE_PODS (100), R is
// INPLACE_ROLLOUT_REAL_NODE_RUNS (3). It logs the tables and, when INPLACE_ROLLOUT_BENCH_OUT
// names a file, writes them there as markdown.
func BenchmarkRealNode(b *testing.B) {
	n, runs := benchstat.EnvCount(b, "INPLACE_ROLLOUT_REAL_NODE_PODS", 100), benchstat.EnvCount(b, "INPLACE_ROLLOUT_REAL_NODE_RUNS", 3)
	results := map[approach][]rolloutResult{}
	for range b.N {
		for _, v := range variants {
			benchStatefulSet(b, n, runs, v, results)
		}
	}
	report := benchReport(b, n, runs, results)
	b.Log("\n" + report)
	if out := os.Getenv("INPLACE_ROLLOUT_BENCH_OUT"); out != "" {
		must(b, os.WriteFile(out, []byte(report), 0o644), "writing %s", out)
	}
	for _, a := range approaches[:2] {
		unit := map[bool]string{true: "inplace", false: "recreate"}[a.InPlace]
		rs := results[a]
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return r.toReady }, 50), unit+"-p50-ready-s")
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return r.out }, 50), unit+"-p50-out-s")
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return []time.Duration{r.wall} }, 50), unit+"-wall-s")
	}
}

// benchStatefulSet measures both approaches runs times on one StatefulSet of n pods behind a
// Service, then deletes it. Each run updates in place (to v2, then v1, alternately) and then
// recreates on v3: every pod starts each image once per UID, so the kubelet's crash back-off
// (keyed by pod UID and image, counting in-place starts) never delays a measured start. The
// in-place target alternates because the CLI takes a run with the spec of the rollout it last
// finished on the workload for that rollout, done.
func benchStatefulSet(b *testing.B, n, runs int, v variant, results map[approach][]rolloutResult) {
	b.Helper()
	ns := env.Namespace(b)
	createService(b, ns, "web")
	if v.gated {
		startGateController(b, ns, "web")
	}
	createBenchStatefulSet(b, ns, "web", n, v)
	for r := range runs {
		for _, a := range approaches {
			if a.PreStop != v.preStop || a.Gated != v.gated {
				continue
			}
			tag := "v3"
			if a.InPlace {
				tag = []string{"v2", "v1"}[r%2]
			}
			res := rollout(b, ns, "web", n, a, tag)
			b.Logf("%s, run %d of %d: wall %s, p50 to Ready %.2f s, p50 out of the EndpointSlice %.2f s, %d pods recreated, %d of %d requests failed",
				a.Name, r+1, runs, res.wall.Round(time.Millisecond), benchstat.Percentile(benchstat.Seconds(res.toReady), 50),
				benchstat.Percentile(benchstat.Seconds(res.out), 50), res.recreated, res.failed, res.sent)
			results[a] = append(results[a], res)
		}
	}
	must(b, env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}), "deleting namespace %s", ns)
	cluster.WaitFor(b, 5*time.Minute, "namespace "+ns+" gone, its pods off the real node", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// rollout performs one measured rollout of approach a to the app image with tag.
func rollout(b *testing.B, ns, name string, n int, a approach, tag string) rolloutResult {
	b.Helper()
	rec := startRecording(b, ns, name, n, digest(b, tag))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen, err := loadgen.Start(ctx, loadgen.Config{Subnet: netip.MustParsePrefix(realnode.Subnet), RPS: loadRPS, Refresh: loadRefresh, Targets: rec.targets})
	must(b, err, "starting the load on Service %s/%s", ns, name)
	start := time.Now()
	if a.InPlace {
		args := []string{"run", "-n", ns, "--target", "statefulset/" + name, "--image", "app=" + image(tag), "--batches", "100%",
			"--max-unavailable", "1", "--kube-api-qps", controllerQPS, "--kube-api-burst", controllerBurst, "--timeout", "5m"}
		if a.Gated {
			args = append(args, "--grace", gateGrace)
		}
		r := run(b, args...)
		if r.Code != 0 {
			b.Fatalf("run %s: %s", tag, r)
		}
	} else {
		sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		must(b, err, "reading StatefulSet %s/%s", ns, name)
		sts.Spec.Template.Spec.Containers[0].Image = image(tag)
		start = time.Now()
		_, err = env.Client.AppsV1().StatefulSets(ns).Update(context.Background(), sts, metav1.UpdateOptions{})
		must(b, err, "changing the template of StatefulSet %s/%s to %s", ns, name, tag)
	}
	wall := time.Since(start)
	res := rec.stop(b, time.Duration(n)*20*time.Second+2*time.Minute)
	load := gen.Stop()
	if !a.InPlace {
		wall = res.last.Sub(start)
	}
	waitSettled(b, ns, name, n)
	return rolloutResult{toReady: res.toReady, out: res.out, wall: wall, recreated: res.recreated,
		sent: load.Sent, failed: load.Sent - load.Codes[http.StatusOK]}
}

// startGateController runs the project's readiness gate controller (pkg/gate) in this process
// for the pods app=app of ns until the benchmark ends.
func startGateController(b *testing.B, ns, app string) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- gate.Run(ctx, env.Client, gate.Options{Namespace: ns, Selector: "app=" + app})
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("the gate controller of %s: %v", ns, err)
		}
	})
}

// createService creates a ClusterIP Service selecting app=name.
func createService(b *testing.B, ns, name string) {
	b.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	_, err := env.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	must(b, err, "creating Service %s/%s", ns, name)
}

// createBenchStatefulSet creates a StatefulSet of n template pods on the real node, with the
// default RollingUpdate strategy (maxUnavailable 1), and waits until all are Ready.
func createBenchStatefulSet(b *testing.B, ns, name string, n int, v variant) {
	b.Helper()
	labels := map[string]string{"app": name}
	tmpl := template(labels)
	if v.preStop {
		tmpl.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}
	}
	if v.gated {
		tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(n)), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
		},
	}
	_, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	must(b, err, "creating StatefulSet %s/%s", ns, name)
	waitSettled(b, ns, name, n)
}

// waitSettled waits until the StatefulSet has every replica Ready and updated, and its current
// revision is its update revision.
func waitSettled(b *testing.B, ns, name string, n int) {
	b.Helper()
	cluster.WaitFor(b, time.Duration(n)*3*time.Second+time.Minute, "StatefulSet "+name+" settled", func(ctx context.Context) (bool, error) {
		s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && st.ReadyReplicas == int32(n) && st.UpdatedReplicas == int32(n) &&
			st.CurrentRevision == st.UpdateRevision, nil
	})
}

// recording watches one rollout's pods and the EndpointSlices of their Service.
type recording struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	pods   *podClock
	eps    *endpointClock
	errs   []string
}

// startRecording starts the watches and returns once the EndpointSlices show every one of the n
// pods ready, with the pods as they are now recorded as "before".
func startRecording(b *testing.B, ns, app string, n int, digest string) *recording {
	b.Helper()
	pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	must(b, err, "listing the pods of %s/%s", ns, app)
	if len(pods.Items) != n {
		b.Fatalf("%d pods of %s/%s, want %d", len(pods.Items), ns, app, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recording{cancel: cancel, pods: newPodClock(pods.Items, digest), eps: newEndpointClock()}
	podWatch, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + app, ResourceVersion: pods.ResourceVersion})
	must(b, err, "watching the pods of %s/%s", ns, app)
	sliceWatch, err := env.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + app})
	must(b, err, "watching the EndpointSlices of %s/%s", ns, app)
	rec.wg.Add(2)
	go rec.follow(ctx, "pods", podWatch.ResultChan(), func(obj any, deleted bool, at time.Time) {
		if p, ok := obj.(*corev1.Pod); ok && !deleted {
			rec.pods.observe(p, at)
		}
	})
	go rec.follow(ctx, "EndpointSlices", sliceWatch.ResultChan(), func(obj any, deleted bool, at time.Time) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			rec.eps.observe(s, deleted, at)
		}
	})
	cluster.WaitFor(b, time.Minute, "every pod ready in the EndpointSlices of "+app, func(context.Context) (bool, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.eps.readyCount() == n, nil
	})
	rec.mu.Lock()
	rec.eps.reset()
	rec.mu.Unlock()
	return rec
}

// targets are the addresses of the pods the Service's EndpointSlices list ready now.
func (rec *recording) targets() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.eps.targets()
}

// follow feeds every event of a watch to observe, under the recording's lock, until ctx ends; a
// watch that ends before is an error.
func (rec *recording) follow(ctx context.Context, what string, events <-chan watch.Event, observe func(obj any, deleted bool, at time.Time)) {
	defer rec.wg.Done()
	for ev := range events {
		at := time.Now()
		rec.mu.Lock()
		observe(ev.Object, ev.Type == watch.Deleted, at)
		rec.mu.Unlock()
	}
	if ctx.Err() == nil {
		rec.mu.Lock()
		rec.errs = append(rec.errs, "the watch of "+what+" ended during the rollout")
		rec.mu.Unlock()
	}
}

// recorded is what a recording measured.
type recorded struct {
	toReady, out []time.Duration
	last         time.Time // when the last pod became Ready on the new image
	recreated    int
}

// stop waits until every pod is Ready on the new image and back in the EndpointSlices (within
// timeout), ends the watches and returns the measurements.
func (rec *recording) stop(b *testing.B, timeout time.Duration) recorded {
	b.Helper()
	defer func() { rec.cancel(); rec.wg.Wait() }()
	n := len(rec.pods.before)
	cluster.WaitFor(b, timeout, "every pod Ready on the new image and ready in the EndpointSlices", func(context.Context) (bool, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.errs) > 0 || (len(rec.pods.done) == n && rec.eps.readyCount() == n) {
			return true, nil
		}
		var waiting []string
		for name := range rec.pods.before {
			if _, done := rec.pods.done[name]; !done {
				waiting = append(waiting, name)
			}
		}
		return false, fmt.Errorf("%d pods not Ready on the new image (%s), %d of %d ready in the EndpointSlices",
			len(waiting), strings.Join(waiting, ", "), rec.eps.readyCount(), n)
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errs) > 0 {
		b.Fatal(strings.Join(rec.errs, "; "))
	}
	var res recorded
	for name, before := range rec.pods.before {
		start, done := rec.pods.start[name], rec.pods.done[name]
		if start.IsZero() || done.Before(start) {
			b.Fatalf("pod %s: Ready on the new image at %s, but its patch or delete was seen at %s", name, done, start)
		}
		res.toReady = append(res.toReady, done.Sub(start))
		res.out = append(res.out, rec.eps.out[name])
		if done.After(res.last) {
			res.last = done
		}
		if rec.pods.uid[name] != before.UID {
			res.recreated++
		}
	}
	return res
}

// podClock times each pod from the watch event that starts its change (its image changed in
// place, or the deletion of the pod) to the first event where the pod is Ready with its app
// container running the new image's digest, Ready, in a container other than before.
type podClock struct {
	before      map[string]corev1.Pod
	digest      string
	start, done map[string]time.Time
	uid         map[string]types.UID
}

func newPodClock(pods []corev1.Pod, digest string) *podClock {
	c := &podClock{before: map[string]corev1.Pod{}, digest: digest, start: map[string]time.Time{}, done: map[string]time.Time{}, uid: map[string]types.UID{}}
	for _, p := range pods {
		c.before[p.Name] = p
		c.uid[p.Name] = p.UID
	}
	return c
}

func (c *podClock) observe(p *corev1.Pod, at time.Time) {
	before, ok := c.before[p.Name]
	if !ok {
		return
	}
	c.uid[p.Name] = p.UID
	if _, seen := c.start[p.Name]; !seen && p.UID == before.UID &&
		(p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != before.Spec.Containers[0].Image) {
		c.start[p.Name] = at
	}
	if _, seen := c.done[p.Name]; seen {
		return
	}
	cs, old := cluster.ContainerStatus(p, "app"), cluster.ContainerStatus(&before, "app")
	if cs != nil && old != nil && strings.HasSuffix(cs.ImageID, "@"+c.digest) && cs.State.Running != nil && cs.Ready &&
		cs.ContainerID != old.ContainerID && cluster.PodReady(p) {
		c.done[p.Name] = at
	}
}

// endpointClock sums, per pod, the time no EndpointSlice of the Service lists it ready.
type endpointClock struct {
	slices map[string]map[string]bool // slice name -> pod name -> endpoint ready
	since  map[string]time.Time       // pods out now, since when
	out    map[string]time.Duration
	addrs  map[string]string // pod name -> its endpoint's address, as last listed
}

func newEndpointClock() *endpointClock {
	return &endpointClock{slices: map[string]map[string]bool{}, since: map[string]time.Time{}, out: map[string]time.Duration{}, addrs: map[string]string{}}
}

// targets are the addresses of the pods listed ready now, as kube-proxy would route to.
func (c *endpointClock) targets() []string {
	var out []string
	for name, addr := range c.addrs {
		if c.ready(name) {
			out = append(out, addr)
		}
	}
	return out
}

func (c *endpointClock) observe(s *discoveryv1.EndpointSlice, deleted bool, at time.Time) {
	pods := map[string]bool{}
	for _, e := range s.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			pods[e.TargetRef.Name] = pods[e.TargetRef.Name] || (e.Conditions.Ready != nil && *e.Conditions.Ready)
			if len(e.Addresses) > 0 {
				c.addrs[e.TargetRef.Name] = e.Addresses[0]
			}
		}
	}
	affected := c.slices[s.Name]
	if deleted {
		delete(c.slices, s.Name)
	} else {
		c.slices[s.Name] = pods
	}
	for _, set := range []map[string]bool{affected, pods} {
		for name := range set {
			_, isOut := c.since[name]
			switch ready := c.ready(name); {
			case !ready && !isOut:
				c.since[name] = at
			case ready && isOut:
				c.out[name] += at.Sub(c.since[name])
				delete(c.since, name)
			}
		}
	}
}

func (c *endpointClock) ready(pod string) bool {
	for _, pods := range c.slices {
		if pods[pod] {
			return true
		}
	}
	return false
}

func (c *endpointClock) readyCount() int {
	ready := map[string]bool{}
	for _, pods := range c.slices {
		for name, r := range pods {
			ready[name] = ready[name] || r
		}
	}
	count := 0
	for _, r := range ready {
		if r {
			count++
		}
	}
	return count
}

// reset starts the sums from zero, now.
func (c *endpointClock) reset() {
	c.out, c.since = map[string]time.Duration{}, map[string]time.Time{}
}

// median is the median across runs of the p-th percentile of each run's values, in seconds.
func median(rs []rolloutResult, values func(rolloutResult) []time.Duration, p float64) float64 {
	return across(rs, values, p).Median
}

// across is the spread across runs of the p-th percentile of each run's values, in seconds.
func across(rs []rolloutResult, values func(rolloutResult) []time.Duration, p float64) benchstat.Spread {
	var per []float64
	for _, r := range rs {
		per = append(per, benchstat.Percentile(benchstat.Seconds(values(r)), p))
	}
	return benchstat.Of(per)
}

// benchReport renders the measurements as a markdown section.
func benchReport(b *testing.B, n, runs int, results map[approach][]rolloutResult) string {
	b.Helper()
	node, err := env.Client.CoreV1().Nodes().Get(context.Background(), env.RealNode.Name, metav1.GetOptions{})
	must(b, err, "reading node %s", env.RealNode.Name)
	info := node.Status.NodeInfo
	var s strings.Builder
	fmt.Fprintf(&s, "# Benchmarks on the real node\n\n")
	fmt.Fprintf(&s, "Written by `make bench` on %s (`go test -bench RealNode ./test/integration/realnode/e2e`). "+
		"Measured on the real node of test/integration/realnode: kubelet %s with %s, on this VM's %d CPUs, which also run the "+
		"control plane (etcd, kube-apiserver, kube-controller-manager built from source), the benchmark and, at times, other work.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), info.KubeletVersion, info.ContainerRuntimeVersion, runtime.NumCPU())
	fmt.Fprintf(&s, "One StatefulSet of **N = %d** pods of the real app (a static Go HTTP server, readiness probe every 1 s, "+
		"terminationGracePeriodSeconds 5) on that node, behind a ClusterIP Service, gets a new image **R = %d** times per approach%s:\n\n", n, runs, defaultsNote(n, runs))
	fmt.Fprintf(&s, "- **in place (CLI)**: `inplace-rollout run --batches 100%% --max-unavailable 1 --kube-api-qps %s --kube-api-burst %s`, "+
		"one pod at a time, at kube-controller-manager's client rate limit (its defaults, which this cluster does not change);\n", controllerQPS, controllerBurst)
	fmt.Fprintf(&s, "- **RollingUpdate (recreate)**: the template's image changed; kube-controller-manager's StatefulSet controller deletes "+
		"and recreates one pod at a time (maxUnavailable 1, its default; a larger maxUnavailable needs the MaxUnavailableStatefulSet "+
		"feature gate, alpha and off in this cluster's v1.34, so no second pair was measured);\n")
	fmt.Fprintf(&s, "- each again on a second StatefulSet whose pods declare the readiness gate `inplace-rollout.io/ready`, the project's gate "+
		"controller (pkg/gate, in the benchmark's process) setting it True on each new pod: in place, the CLI with `--grace %s` drains "+
		"each pod through the gate (False, so it leaves the EndpointSlice) and patches it %s later;\n", gateGrace, gateGrace)
	fmt.Fprintf(&s, "- each again with `lifecycle.preStop.sleep.seconds: 2` on the app container, on a third StatefulSet.\n\n")
	fmt.Fprintf(&s, "During every rollout a load of %d requests/s goes to the Service's pods from the host, over the node's bridge, in turn "+
		"to the pods its EndpointSlices listed ready when the load generator last synced (every %s, as kube-proxy syncs at most once "+
		"a second by default); a request fails when it gets no answer within 1 s (refused, reset, timed out) or an answer other than 200.\n\n",
		loadRPS, loadRefresh)
	fmt.Fprintf(&s, "Each run updates in place (to v2, then v1, alternately; the same size), then recreates on v3: every pod starts "+
		"each image once per pod UID, so the kubelet's crash back-off (keyed by pod UID and image; in-place starts count) never "+
		"delays a measured start. The app images are already on the node, but for the first pod of the first run to each tag. "+
		"Times come from watches in the benchmark process, so watch latency is in every number alike. "+
		"Each cell is the median across the R runs of that run's statistic, with its range (min–max) in brackets; seconds.\n\n")

	table := func(title, what string, values func(rolloutResult) []time.Duration) {
		fmt.Fprintf(&s, "## %s\n\n%s\n\n| approach | p50 | p99 | max |\n| --- | --- | --- | --- |\n", title, what)
		for _, a := range approaches {
			rs := results[a]
			fmt.Fprintf(&s, "| %s | %s | %s | %s |\n", a.Name, across(rs, values, 50).Cell(2), across(rs, values, 99).Cell(2), across(rs, values, 100).Cell(2))
		}
		s.WriteString("\n")
	}
	table("Per pod: change to Ready on the new image",
		"In place, from the watch event where the pod's spec shows the new image; recreate, from the event where the old pod "+
			"gets its deletionTimestamp; to the first event where the pod (the same UID in place, a new one recreated) is Ready "+
			"with its app container running the new image's digest, Ready, in a new container.",
		func(r rolloutResult) []time.Duration { return r.toReady })
	fmt.Fprintf(&s, "It shows how long each pod takes, once its change starts, to run the new image Ready; with the hook, both include "+
		"its 2 s. It says nothing about traffic (next table) or about a whole rollout (the last).\n\n")
	table("Per pod: time out of the Service's EndpointSlice",
		"Per pod, the sum of the intervals during the rollout in which no EndpointSlice of the Service lists it ready "+
			"(not ready, terminating, or absent), as the EndpointSlice controller wrote them.",
		func(r rolloutResult) []time.Duration { return r.out })
	fmt.Fprintf(&s, "It shows how long the Service stops sending each pod new traffic. It is no measure of errors (next table): in place, "+
		"without the readiness gate, a pod stays listed ready while its old container runs the preStop hook and stops, so requests "+
		"can still reach a stopping container, where a pod being deleted leaves the list at once.\n\n")
	fmt.Fprintf(&s, "## Requests under load\n\nThe load's requests during each rollout and those that failed.\n\n"+
		"| approach | requests sent | failed | failed %% |\n| --- | --- | --- | --- |\n")
	for _, a := range approaches {
		var sent, failed, share []float64
		for _, r := range results[a] {
			sent, failed = append(sent, float64(r.sent)), append(failed, float64(r.failed))
			share = append(share, 100*float64(r.failed)/float64(max(r.sent, 1)))
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s |\n", a.Name, benchstat.Of(sent).Cell(0), benchstat.Of(failed).Cell(0), benchstat.Of(share).Cell(2))
	}
	s.WriteString("\n")

	fmt.Fprintf(&s, "## Whole rollout: wall time for %d pods\n\n"+
		"In place, the CLI's run from start to exit (it ends once every pod is updated and the StatefulSet is finalized); recreate, "+
		"from the template change to the last pod Ready on the new image.\n\n| approach | wall time (s) | pods recreated |\n| --- | --- | --- |\n", n)
	for _, a := range approaches {
		rs := results[a]
		var recreated []float64
		for _, r := range rs {
			recreated = append(recreated, float64(r.recreated))
		}
		fmt.Fprintf(&s, "| %s | %s | %s |\n", a.Name, across(rs, func(r rolloutResult) []time.Duration { return []time.Duration{r.wall} }, 100).Cell(1),
			benchstat.Of(recreated).Cell(0))
	}
	fmt.Fprintf(&s, "\nOne pod at a time, a rollout's wall time is about N times the per-pod time plus each driver's own "+
		"work between pods; both ran at the same client rate limit, on one node of 2 shared cores.\n")
	return s.String()
}

// defaultsNote says when N or R are not the benchmark's defaults.
func defaultsNote(n, runs int) string {
	if n == 100 && runs == 3 {
		return ""
	}
	return " (set by INPLACE_ROLLOUT_REAL_NODE_PODS and INPLACE_ROLLOUT_REAL_NODE_RUNS; `make bench` runs N = 100, R = 3)"
}
