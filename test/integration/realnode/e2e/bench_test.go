package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
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

// The workload kinds the benchmark rolls out: the two native ones with pods of their own names
// and of new names, and OpenKruise's CloneSet, the incumbent in-place updater.
const (
	statefulSetKind = "StatefulSet"
	deploymentKind  = "Deployment"
	cloneSetKind    = "CloneSet"
)

// approach is one way of rolling a new image out to a workload's pods.
type approach struct {
	Name string
	Kind string // the workload
	// InPlace is the CLI in place; else the workload's own controller: RollingUpdate, which
	// recreates, for the native kinds, InPlaceIfPossible for the CloneSet.
	InPlace bool
	PreStop bool // lifecycle.preStop.sleep 2 s on the app container
	// Gated pods declare the readiness gate inplace-rollout.io/ready, which the project's gate
	// controller sets True on new pods; the CLI drains each pod through it, gateGrace before
	// its patch.
	Gated bool
}

var approaches = []approach{
	{"in place (CLI)", statefulSetKind, true, false, false},
	{"RollingUpdate (recreate)", statefulSetKind, false, false, false},
	{"in place (CLI), readiness gate", statefulSetKind, true, false, true},
	{"RollingUpdate (recreate), readiness gate", statefulSetKind, false, false, true},
	{"in place (CLI), preStop 2 s", statefulSetKind, true, true, false},
	{"RollingUpdate (recreate), preStop 2 s", statefulSetKind, false, true, false},
	{"Deployment: in place (CLI)", deploymentKind, true, false, false},
	{"Deployment: RollingUpdate (recreate)", deploymentKind, false, false, false},
	{"CloneSet: InPlaceIfPossible (OpenKruise)", cloneSetKind, false, false, false},
}

// variant is a workload of its own: its kind and what its pods declare beyond the template (a
// preStop hook, or the readiness gate). INPLACE_ROLLOUT_REAL_NODE_VARIANTS names the variants
// measured, defaultVariants when unset.
type variant struct {
	name           string
	kind           string
	preStop, gated bool
}

var variants = []variant{
	{"statefulset", statefulSetKind, false, false},
	{"statefulset-gated", statefulSetKind, false, true},
	{"statefulset-prestop", statefulSetKind, true, false},
	{"deployment", deploymentKind, false, false},
	{"cloneset", cloneSetKind, false, false},
}

// defaultVariants are the StatefulSet's three, which docs/benchmarks-realnode.md reports; `make
// bench` measures "deployment,cloneset" again for docs/benchmarks-realnode-workloads.md.
const defaultVariants = "statefulset,statefulset-gated,statefulset-prestop"

// selectedVariants are the variants INPLACE_ROLLOUT_REAL_NODE_VARIANTS names.
func selectedVariants(b *testing.B) []variant {
	b.Helper()
	names := os.Getenv("INPLACE_ROLLOUT_REAL_NODE_VARIANTS")
	if names == "" {
		names = defaultVariants
	}
	var out []variant
	for name := range strings.SplitSeq(names, ",") {
		i := slices.IndexFunc(variants, func(v variant) bool { return v.name == strings.TrimSpace(name) })
		if i < 0 {
			known := make([]string, 0, len(variants))
			for _, v := range variants {
				known = append(known, v.name)
			}
			b.Fatalf("INPLACE_ROLLOUT_REAL_NODE_VARIANTS names %q, which is no variant: use a comma-separated list of %s", name, strings.Join(known, ", "))
		}
		out = append(out, variants[i])
	}
	return out
}

// measures says whether variant v measures approach a.
func (v variant) measures(a approach) bool {
	return a.Kind == v.kind && a.PreStop == v.preStop && a.Gated == v.gated
}

// cloneSetGrace is the CloneSet's inPlaceUpdateStrategy.gracePeriodSeconds: OpenKruise marks a
// pod not ready (its InPlaceUpdateReady gate) this long before it patches the image, as the CLI
// with --grace gateGrace drains a gated pod.
const cloneSetGrace = 2

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

// BenchmarkRealNode rolls a new image out to the N pods of a workload on the real node, R
// times per approach, under a request load. By default the workload is a StatefulSet, in place
// by the CLI and recreated by the StatefulSet controller's RollingUpdate, on plain pods, on pods
// with the readiness gate, and on pods with a preStop hook (a StatefulSet each); the variants
// "deployment" (the CLI in place, and RollingUpdate) and "cloneset" (OpenKruise in place) roll
// out the other kinds. One pod at a time throughout, every driver at the controller manager's
// client rate limit. N is INPLACE_ROLLOUT_REAL_NODE_PODS (100), R is
// INPLACE_ROLLOUT_REAL_NODE_RUNS (3), the variants INPLACE_ROLLOUT_REAL_NODE_VARIANTS
// (defaultVariants). It logs the tables and, when INPLACE_ROLLOUT_BENCH_OUT names a file, writes
// them there as markdown.
func BenchmarkRealNode(b *testing.B) {
	n, runs := benchstat.EnvCount(b, "INPLACE_ROLLOUT_REAL_NODE_PODS", 100), benchstat.EnvCount(b, "INPLACE_ROLLOUT_REAL_NODE_RUNS", 3)
	selected := selectedVariants(b)
	results := map[approach][]rolloutResult{}
	for range b.N {
		for _, v := range selected {
			benchVariant(b, n, runs, v, results)
		}
	}
	report := benchReport(b, n, runs, results)
	b.Log("\n" + report)
	if out := os.Getenv("INPLACE_ROLLOUT_BENCH_OUT"); out != "" {
		must(b, os.WriteFile(out, []byte(report), 0o644), "writing %s", out)
	}
	for _, a := range approaches[:2] {
		rs := results[a]
		if len(rs) == 0 {
			continue
		}
		unit := map[bool]string{true: "inplace", false: "recreate"}[a.InPlace]
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return r.toReady }, 50), unit+"-p50-ready-s")
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return r.out }, 50), unit+"-p50-out-s")
		b.ReportMetric(median(rs, func(r rolloutResult) []time.Duration { return []time.Duration{r.wall} }, 50), unit+"-wall-s")
	}
}

// benchVariant measures the variant's approaches runs times on one workload of n pods behind a
// Service, then deletes its namespace. For the native kinds, each run updates in place (to v2,
// then v1, alternately) and then recreates on v3: every pod starts each image once per UID, so
// the kubelet's crash back-off (keyed by pod UID and image, counting in-place starts) never
// delays a measured start. The in-place target alternates because the CLI takes a run with the
// spec of the rollout it last finished on the workload for that rollout, done. A CloneSet, whose
// pods its controller only updates in place, is created anew on v1 for each run and updated to
// v2, for the same reason.
func benchVariant(b *testing.B, n, runs int, v variant, results map[approach][]rolloutResult) {
	b.Helper()
	ns := env.Namespace(b)
	createService(b, ns, "web")
	if v.gated {
		startGateController(b, ns, "web")
	}
	if v.kind == cloneSetKind {
		startKruise(b)
	} else {
		createBenchWorkload(b, ns, "web", n, v)
	}
	for r := range runs {
		for _, a := range approaches {
			if !v.measures(a) {
				continue
			}
			tag := "v3"
			switch {
			case v.kind == cloneSetKind:
				createBenchWorkload(b, ns, "web", n, v)
				tag = "v2"
			case a.InPlace:
				tag = []string{"v2", "v1"}[r%2]
			}
			res := rollout(b, ns, "web", n, a, tag)
			b.Logf("%s, run %d of %d: wall %s, p50 to Ready %.2f s, p50 out of the EndpointSlice %.2f s, %d pods recreated, %d of %d requests failed",
				a.Name, r+1, runs, res.wall.Round(time.Millisecond), benchstat.Percentile(benchstat.Seconds(res.toReady), 50),
				benchstat.Percentile(benchstat.Seconds(res.out), 50), res.recreated, res.failed, res.sent)
			results[a] = append(results[a], res)
			if v.kind == cloneSetKind {
				deleteCloneSet(b, ns, "web")
			}
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
		args := []string{"run", "-n", ns, "--target", strings.ToLower(a.Kind) + "/" + name, "--image", "app=" + image(tag), "--batches", "100%",
			"--max-unavailable", "1", "--kube-api-qps", controllerQPS, "--kube-api-burst", controllerBurst, "--timeout", "5m"}
		if a.Gated {
			args = append(args, "--grace", gateGrace)
		}
		r := run(b, args...)
		if r.Code != 0 {
			b.Fatalf("run %s: %s", tag, r)
		}
	} else {
		start = setTemplateImage(b, ns, name, a.Kind, image(tag))
	}
	wall := time.Since(start)
	res := rec.stop(b, time.Duration(n)*20*time.Second+2*time.Minute)
	load := gen.Stop()
	if !a.InPlace {
		wall = res.last.Sub(start)
	}
	waitSettled(b, ns, name, n, a.Kind)
	return rolloutResult{toReady: res.toReady, out: res.out, wall: wall, recreated: res.recreated,
		sent: load.Sent, failed: load.Sent - load.Codes[http.StatusOK]}
}

// setTemplateImage changes the app container's image in the template of the workload of kind,
// which its controller then rolls out, and returns when the change was sent.
func setTemplateImage(b *testing.B, ns, name, kind, img string) time.Time {
	b.Helper()
	ctx := context.Background()
	switch kind {
	case statefulSetKind:
		sts, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		must(b, err, "reading StatefulSet %s/%s", ns, name)
		sts.Spec.Template.Spec.Containers[0].Image = img
		start := time.Now()
		_, err = env.Client.AppsV1().StatefulSets(ns).Update(ctx, sts, metav1.UpdateOptions{})
		must(b, err, "changing the template of StatefulSet %s/%s to %s", ns, name, img)
		return start
	case deploymentKind:
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		must(b, err, "reading Deployment %s/%s", ns, name)
		d.Spec.Template.Spec.Containers[0].Image = img
		start := time.Now()
		_, err = env.Client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		must(b, err, "changing the template of Deployment %s/%s to %s", ns, name, img)
		return start
	default:
		sets := cloneSets(b, ns)
		cs, err := sets.Get(ctx, name, metav1.GetOptions{})
		must(b, err, "reading CloneSet %s/%s", ns, name)
		containers, _, err := unstructured.NestedSlice(cs.Object, "spec", "template", "spec", "containers")
		must(b, err, "reading the containers of CloneSet %s/%s", ns, name)
		containers[0].(map[string]any)["image"] = img
		must(b, unstructured.SetNestedSlice(cs.Object, containers, "spec", "template", "spec", "containers"), "setting the image of CloneSet %s/%s", ns, name)
		start := time.Now()
		_, err = sets.Update(ctx, cs, metav1.UpdateOptions{})
		must(b, err, "changing the template of CloneSet %s/%s to %s", ns, name, img)
		return start
	}
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

// startKruise starts kruise-manager once, at the CLI's and kube-controller-manager's client rate
// limit, and waits until its set-up has ended, so that no rollout measures its start; the
// cluster stops it.
func startKruise(b *testing.B) {
	b.Helper()
	if env.Kruise != nil {
		return
	}
	qps, err := strconv.Atoi(controllerQPS)
	must(b, err, "reading the client rate limit")
	burst, err := strconv.Atoi(controllerBurst)
	must(b, err, "reading the client burst")
	_, err = env.StartKruise(context.Background(), cluster.KruiseOptions{QPS: qps, Burst: burst, Settled: true})
	must(b, err, "starting kruise-manager")
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

// createBenchWorkload creates the variant's workload of n template pods on the real node, one pod
// at a time when its controller rolls out (a StatefulSet's default RollingUpdate, maxUnavailable
// 1; a Deployment's RollingUpdate with maxUnavailable 1 and maxSurge 0; a CloneSet's
// InPlaceIfPossible with maxUnavailable 1, maxSurge 0 and cloneSetGrace), and waits until all
// are Ready.
func createBenchWorkload(b *testing.B, ns, name string, n int, v variant) {
	b.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	tmpl := template(labels)
	if v.preStop {
		tmpl.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}
	}
	if v.gated {
		tmpl.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	}
	selector := &metav1.LabelSelector{MatchLabels: labels}
	var err error
	switch v.kind {
	case statefulSetKind:
		_, err = env.Client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To(int32(n)), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector: selector, Template: tmpl,
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			},
		}, metav1.CreateOptions{})
	case deploymentKind:
		one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
		_, err = env.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(n)), Selector: selector, Template: tmpl,
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &one, MaxSurge: &zero}},
			},
		}, metav1.CreateOptions{})
	default:
		var tmplObj map[string]any
		tmplObj, err = k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
		must(b, err, "converting the pod template of CloneSet %s/%s", ns, name)
		// Every field its controller reads is set: no defaulting webhook runs here.
		_, err = cloneSets(b, ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps.kruise.io/v1alpha1",
			"kind":       "CloneSet",
			"metadata":   map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{
				"replicas":             int64(n),
				"revisionHistoryLimit": int64(10),
				"scaleStrategy":        map[string]any{},
				"selector":             map[string]any{"matchLabels": map[string]any{"app": name}},
				"template":             tmplObj,
				"updateStrategy": map[string]any{"type": "InPlaceIfPossible", "partition": int64(0), "maxUnavailable": int64(1), "maxSurge": int64(0),
					"inPlaceUpdateStrategy": map[string]any{"gracePeriodSeconds": int64(cloneSetGrace)}},
			},
		}}, metav1.CreateOptions{})
	}
	must(b, err, "creating %s %s/%s", v.kind, ns, name)
	waitSettled(b, ns, name, n, v.kind)
}

// cloneSets is the client of OpenKruise's CloneSets in ns.
func cloneSets(b *testing.B, ns string) dynamic.ResourceInterface {
	b.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	must(b, err, "building a dynamic client")
	return dyn.Resource(schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1alpha1", Resource: "clonesets"}).Namespace(ns)
}

// deleteCloneSet deletes the CloneSet and waits until it and its pods are gone (foreground: the
// garbage collector deletes the pods, then the CloneSet), so that the next run can create it.
func deleteCloneSet(b *testing.B, ns, name string) {
	b.Helper()
	sets := cloneSets(b, ns)
	must(b, sets.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}),
		"deleting CloneSet %s/%s", ns, name)
	cluster.WaitFor(b, 5*time.Minute, "CloneSet "+name+" and its pods gone", func(ctx context.Context) (bool, error) {
		if _, err := sets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, err
		}
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == 0, err
	})
}

// waitSettled waits until the workload of kind has every replica Ready on its current template
// and it lists exactly n pods, none terminating (a Deployment's status stops counting a deleted
// pod before the pod is gone).
func waitSettled(b *testing.B, ns, name string, n int, kind string) {
	b.Helper()
	cluster.WaitFor(b, time.Duration(n)*3*time.Second+time.Minute, kind+" "+name+" settled", func(ctx context.Context) (bool, error) {
		settled, err := workloadSettled(ctx, b, ns, name, n, kind)
		if err != nil || !settled {
			return false, err
		}
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return len(pods.Items) == n, nil
	})
}

// workloadSettled reads the workload's status: observed, every replica Ready and updated.
func workloadSettled(ctx context.Context, b *testing.B, ns, name string, n int, kind string) (bool, error) {
	want := int32(n)
	switch kind {
	case statefulSetKind:
		s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && st.ReadyReplicas == want && st.UpdatedReplicas == want &&
			st.CurrentRevision == st.UpdateRevision, nil
	case deploymentKind:
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := d.Status
		return !d.Spec.Paused && st.ObservedGeneration == d.Generation && st.Replicas == want && st.ReadyReplicas == want &&
			st.UpdatedReplicas == want && st.AvailableReplicas == want, nil
	default:
		cs, err := cloneSets(b, ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status := func(field string) int64 { v, _, _ := unstructured.NestedInt64(cs.Object, "status", field); return v }
		return status("observedGeneration") == cs.GetGeneration() && status("replicas") == int64(n) &&
			status("readyReplicas") == int64(n) && status("updatedReadyReplicas") == int64(n), nil
	}
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
	rec := &recording{cancel: cancel, pods: newPodClock(pods.Items, digest)}
	rec.eps = newEndpointClock(rec.pods.slot)
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
		if len(rec.errs) > 0 || len(rec.pods.unmatched) > 0 || (len(rec.pods.done) == n && rec.eps.readyCount() == n) {
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
	if len(rec.pods.unmatched) > 0 {
		b.Fatalf("pods %s appeared before any pod they could replace was deleted", strings.Join(rec.pods.unmatched, ", "))
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
// place, or the deletion of the pod) to the first event where the pod, or the pod that replaced
// it, is Ready with its app container running the new image's digest, Ready, in a container
// other than before. A StatefulSet's pod comes back under its name; a Deployment's new pod, under
// a new name, replaces the deleted pod whose deletion was seen first and that no new pod has
// replaced yet (with maxSurge 0 the Deployment deletes a pod before it creates its successor).
// Pods are keyed by their name before the rollout, their slot.
type podClock struct {
	before      map[string]corev1.Pod
	digest      string
	start, done map[string]time.Time
	uid         map[string]types.UID
	// replaces maps a new pod's name to its slot, replaced the slots to their new pods.
	replaces, replaced map[string]string
	// unmatched are new pods that appeared with no deleted pod to replace.
	unmatched []string
}

func newPodClock(pods []corev1.Pod, digest string) *podClock {
	c := &podClock{before: map[string]corev1.Pod{}, digest: digest, start: map[string]time.Time{}, done: map[string]time.Time{},
		uid: map[string]types.UID{}, replaces: map[string]string{}, replaced: map[string]string{}}
	for _, p := range pods {
		c.before[p.Name] = p
		c.uid[p.Name] = p.UID
	}
	return c
}

// slot is the slot of the pod named pod, if it has one yet.
func (c *podClock) slot(pod string) (string, bool) {
	if _, ok := c.before[pod]; ok {
		return pod, true
	}
	s, ok := c.replaces[pod]
	return s, ok
}

// assign gives a new pod the slot of the deleted pod it replaces.
func (c *podClock) assign(pod string) (string, bool) {
	if s, ok := c.slot(pod); ok {
		return s, true
	}
	var first string
	for name := range c.before {
		start, deleting := c.start[name]
		if _, taken := c.replaced[name]; deleting && !taken && (first == "" || start.Before(c.start[first])) {
			first = name
		}
	}
	if first == "" {
		c.unmatched = append(c.unmatched, pod)
		return "", false
	}
	c.replaces[pod], c.replaced[first] = first, pod
	return first, true
}

func (c *podClock) observe(p *corev1.Pod, at time.Time) {
	slot, ok := c.assign(p.Name)
	if !ok {
		return
	}
	before := c.before[slot]
	if p.UID != before.UID {
		c.uid[slot] = p.UID
	} else if _, seen := c.start[slot]; !seen && (p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != before.Spec.Containers[0].Image) {
		c.start[slot] = at
	}
	if _, seen := c.done[slot]; seen {
		return
	}
	cs, old := cluster.ContainerStatus(p, "app"), cluster.ContainerStatus(&before, "app")
	if cs != nil && old != nil && strings.HasSuffix(cs.ImageID, "@"+c.digest) && cs.State.Running != nil && cs.Ready &&
		cs.ContainerID != old.ContainerID && cluster.PodReady(p) {
		c.done[slot] = at
	}
}

// endpointClock sums, per slot (podClock), the time no EndpointSlice of the Service lists a pod
// of the slot ready.
type endpointClock struct {
	slices map[string]map[string]bool // slice name -> pod name -> endpoint ready
	since  map[string]time.Time       // slots out now, since when
	out    map[string]time.Duration
	addrs  map[string]string // pod name -> its endpoint's address, as last listed
	// slot is the slot of a pod, if it has one yet.
	slot func(pod string) (string, bool)
}

func newEndpointClock(slot func(pod string) (string, bool)) *endpointClock {
	return &endpointClock{slices: map[string]map[string]bool{}, since: map[string]time.Time{}, out: map[string]time.Duration{},
		addrs: map[string]string{}, slot: slot}
}

// targets are the addresses of the pods listed ready now, as kube-proxy would route to.
func (c *endpointClock) targets() []string {
	ready := map[string]bool{}
	for _, pods := range c.slices {
		for name, r := range pods {
			ready[name] = ready[name] || r
		}
	}
	var out []string
	for name, r := range ready {
		if r {
			out = append(out, c.addrs[name])
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
			slot, ok := c.slot(name)
			if !ok {
				continue
			}
			_, isOut := c.since[slot]
			switch ready := c.readySlots()[slot]; {
			case !ready && !isOut:
				c.since[slot] = at
			case ready && isOut:
				c.out[slot] += at.Sub(c.since[slot])
				delete(c.since, slot)
			}
		}
	}
}

// readySlots are the slots with a pod listed ready.
func (c *endpointClock) readySlots() map[string]bool {
	ready := map[string]bool{}
	for _, pods := range c.slices {
		for name, r := range pods {
			if slot, ok := c.slot(name); ok && r {
				ready[slot] = true
			}
		}
	}
	return ready
}

func (c *endpointClock) readyCount() int {
	return len(c.readySlots())
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
	var measured []approach
	kinds := map[string]bool{}
	for _, a := range approaches {
		if len(results[a]) > 0 {
			measured = append(measured, a)
			kinds[a.Kind] = true
		}
	}
	var s strings.Builder
	title := "Benchmarks on the real node"
	if !kinds[statefulSetKind] {
		var others []string
		for _, k := range []string{deploymentKind, cloneSetKind} {
			if kinds[k] {
				others = append(others, k+"s")
			}
		}
		title += ": " + strings.Join(others, " and ")
	}
	fmt.Fprintf(&s, "# %s\n\n", title)
	fmt.Fprintf(&s, "Written by `make bench` on %s (`go test -bench RealNode ./test/integration/realnode/e2e`%s). "+
		"Measured on the real node of test/integration/realnode: kubelet %s with %s, on this VM's %d CPUs, which also run the "+
		"control plane (etcd, kube-apiserver, kube-controller-manager built from source), the benchmark and, at times, other work.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), variantsNote(), info.KubeletVersion, info.ContainerRuntimeVersion, runtime.NumCPU())
	if kinds[statefulSetKind] {
		s.WriteString("The same node and load with a Deployment and with OpenKruise's CloneSet: [benchmarks-realnode-workloads.md](benchmarks-realnode-workloads.md).\n\n")
	} else {
		s.WriteString("The same node and load with a StatefulSet (plain, with the readiness gate, with a preStop hook): [benchmarks-realnode.md](benchmarks-realnode.md).\n\n")
	}
	fmt.Fprintf(&s, "A workload of **N = %d** pods of the real app (a static Go HTTP server, readiness probe every 1 s, "+
		"terminationGracePeriodSeconds 5) on that node, behind a ClusterIP Service, gets a new image **R = %d** times per approach%s, "+
		"one pod at a time, every driver at kube-controller-manager's client rate limit (%s requests/s, burst %s: its defaults, "+
		"which this cluster does not change):\n\n", n, runs, defaultsNote(n, runs), controllerQPS, controllerBurst)
	if kinds[statefulSetKind] {
		fmt.Fprintf(&s, "- **in place (CLI)**, on a StatefulSet: `inplace-rollout run --batches 100%% --max-unavailable 1 --kube-api-qps %s --kube-api-burst %s`;\n",
			controllerQPS, controllerBurst)
		fmt.Fprintf(&s, "- **RollingUpdate (recreate)**: the StatefulSet's template image changed; kube-controller-manager's StatefulSet controller deletes "+
			"and recreates one pod at a time (maxUnavailable 1, its default; a larger maxUnavailable needs the MaxUnavailableStatefulSet "+
			"feature gate, alpha and off in this cluster's v1.34, so no second pair was measured);\n")
		fmt.Fprintf(&s, "- each again on a second StatefulSet whose pods declare the readiness gate `inplace-rollout.io/ready`, the project's gate "+
			"controller (pkg/gate, in the benchmark's process) setting it True on each new pod: in place, the CLI with `--grace %s` drains "+
			"each pod through the gate (False, so it leaves the EndpointSlice) and patches it %s later;\n", gateGrace, gateGrace)
		fmt.Fprintf(&s, "- each again with `lifecycle.preStop.sleep.seconds: 2` on the app container, on a third StatefulSet.\n")
	}
	if kinds[deploymentKind] {
		fmt.Fprintf(&s, "- **Deployment: in place (CLI)**: the same command with `--target deployment/web`; the CLI pauses the Deployment while "+
			"its pods change and finalizes its template afterwards;\n")
		fmt.Fprintf(&s, "- **Deployment: RollingUpdate (recreate)**: the Deployment's template image changed, strategy RollingUpdate with "+
			"maxUnavailable 1 and maxSurge 0: its ReplicaSets delete an old pod, then create a new one (under a new name), one at a time; "+
			"each new pod is timed against the old pod it replaces, the earliest deleted that no new pod had replaced yet;\n")
	}
	if kinds[cloneSetKind] {
		fmt.Fprintf(&s, "- **CloneSet: InPlaceIfPossible (OpenKruise)**: kruise-manager %s (`%s`, with `--rest-config-qps=%s --rest-config-burst=%s`, "+
			"started and settled before the first rollout; its webhooks are off, see test/integration/cluster/kruise.go), updateStrategy "+
			"InPlaceIfPossible with maxUnavailable 1, maxSurge 0 and `inPlaceUpdateStrategy.gracePeriodSeconds: %d`: it sets its readiness "+
			"gate InPlaceUpdateReady False, patches the pod's image %d s later, as the CLI with `--grace %s` drains a gated pod, and sets "+
			"the gate True once the kubelet runs the new image. A CloneSet's pods are updated in place only, so each run creates a new "+
			"CloneSet on v1 (not measured) and updates it to v2.\n", cluster.KruiseVersion, cluster.KruiseBuild, controllerQPS, controllerBurst,
			cloneSetGrace, cloneSetGrace, gateGrace)
	}
	s.WriteString("\n")
	fmt.Fprintf(&s, "During every rollout a load of %d requests/s goes to the Service's pods from the host, over the node's bridge, in turn "+
		"to the pods its EndpointSlices listed ready when the load generator last synced (every %s, as kube-proxy syncs at most once "+
		"a second by default); a request fails when it gets no answer within 1 s (refused, reset, timed out) or an answer other than 200.\n\n",
		loadRPS, loadRefresh)
	if kinds[statefulSetKind] || kinds[deploymentKind] {
		fmt.Fprintf(&s, "Each run of a StatefulSet or a Deployment updates in place (to v2, then v1, alternately; the same size), then recreates on "+
			"v3: every pod starts each image once per pod UID, so the kubelet's crash back-off (keyed by pod UID and image; in-place "+
			"starts count) never delays a measured start. The app images are already on the node, but for the first pod of the first run to each tag. ")
	}
	fmt.Fprintf(&s, "Times come from watches in the benchmark process, so watch latency is in every number alike. "+
		"Each cell is the median across the R runs of that run's statistic, with its range (min–max) in brackets; seconds.\n\n")

	table := func(title, what string, values func(rolloutResult) []time.Duration) {
		fmt.Fprintf(&s, "## %s\n\n%s\n\n| approach | p50 | p99 | max |\n| --- | --- | --- | --- |\n", title, what)
		for _, a := range measured {
			rs := results[a]
			fmt.Fprintf(&s, "| %s | %s | %s | %s |\n", a.Name, across(rs, values, 50).Cell(2), across(rs, values, 99).Cell(2), across(rs, values, 100).Cell(2))
		}
		s.WriteString("\n")
	}
	table("Per pod: change to Ready on the new image",
		"In place (the CLI's patch or OpenKruise's), from the watch event where the pod's spec shows the new image; recreate, from "+
			"the event where the old pod gets its deletionTimestamp; to the first event where the pod (the same UID in place, a new one "+
			"recreated, for a Deployment the pod that replaced it) is Ready "+
			"with its app container running the new image's digest, Ready, in a new container.",
		func(r rolloutResult) []time.Duration { return r.toReady })
	hook := ""
	if slices.ContainsFunc(measured, func(a approach) bool { return a.PreStop }) {
		hook = "; with the hook, both include its 2 s"
	}
	fmt.Fprintf(&s, "It shows how long each pod takes, once its change starts, to run the new image Ready%s. It says nothing about "+
		"traffic (next table) or about a whole rollout (the last).\n\n", hook)
	table("Per pod: time out of the Service's EndpointSlice",
		"Per pod, the sum of the intervals during the rollout in which no EndpointSlice of the Service lists it ready "+
			"(not ready, terminating, or absent; for a Deployment, neither it nor the pod that replaced it), as the EndpointSlice "+
			"controller wrote them.",
		func(r rolloutResult) []time.Duration { return r.out })
	fmt.Fprintf(&s, "It shows how long the Service stops sending each pod new traffic. It is no measure of errors (next table): in place, "+
		"without the readiness gate, a pod stays listed ready while its old container runs the preStop hook and stops, so requests "+
		"can still reach a stopping container, where a pod being deleted leaves the list at once.\n\n")
	fmt.Fprintf(&s, "## Requests under load\n\nThe load's requests during each rollout and those that failed.\n\n"+
		"| approach | requests sent | failed | failed %% |\n| --- | --- | --- | --- |\n")
	for _, a := range measured {
		var sent, failed, share []float64
		for _, r := range results[a] {
			sent, failed = append(sent, float64(r.sent)), append(failed, float64(r.failed))
			share = append(share, 100*float64(r.failed)/float64(max(r.sent, 1)))
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s |\n", a.Name, benchstat.Of(sent).Cell(0), benchstat.Of(failed).Cell(0), benchstat.Of(share).Cell(2))
	}
	s.WriteString("\n")

	fmt.Fprintf(&s, "## Whole rollout: wall time for %d pods\n\n"+
		"In place by the CLI, its run from start to exit (it ends once every pod is updated and the workload is finalized); by the "+
		"workload's own controller (recreate, or OpenKruise in place), from the template change to the last pod Ready on the new image.\n\n| approach | wall time (s) | pods recreated |\n| --- | --- | --- |\n", n)
	for _, a := range measured {
		rs := results[a]
		var recreated []float64
		for _, r := range rs {
			recreated = append(recreated, float64(r.recreated))
		}
		fmt.Fprintf(&s, "| %s | %s | %s |\n", a.Name, across(rs, func(r rolloutResult) []time.Duration { return []time.Duration{r.wall} }, 100).Cell(1),
			benchstat.Of(recreated).Cell(0))
	}
	fmt.Fprintf(&s, "\nOne pod at a time, a rollout's wall time is about N times the per-pod time plus each driver's own "+
		"work between pods; all ran at the same client rate limit, on one node of 2 shared cores.\n")
	return s.String()
}

// variantsNote names the variants when they are not the default ones.
func variantsNote() string {
	if v := os.Getenv("INPLACE_ROLLOUT_REAL_NODE_VARIANTS"); v != "" && v != defaultVariants {
		return " with `INPLACE_ROLLOUT_REAL_NODE_VARIANTS=" + v + "`"
	}
	return ""
}

// defaultsNote says when N or R are not the benchmark's defaults.
func defaultsNote(n, runs int) string {
	if n == 100 && runs == 3 {
		return ""
	}
	return " (set by INPLACE_ROLLOUT_REAL_NODE_PODS and INPLACE_ROLLOUT_REAL_NODE_RUNS; `make bench` runs N = 100, R = 3)"
}
