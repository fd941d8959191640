package tekton_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/benchstat"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/procstat"
)

// The concurrent benchmark's shape: how many CustomRuns of how many pods each, by default 50 of
// 20 as test/integration/scale's BenchmarkArgoConcurrentRollouts; the environment variables
// override it, for a small run.
const (
	rolloutsEnv     = "INPLACE_ROLLOUT_BENCH_ROLLOUTS"
	podsEnv         = "INPLACE_ROLLOUT_BENCH_PODS"
	defaultRollouts = 50
	defaultPods     = 20
)

const (
	// concurrentBound is how long the concurrent runs may take before the benchmark gives up:
	// a bound on a stuck run, not a measurement.
	concurrentBound = 30 * time.Minute
	// targetsReady bounds the creation of the benchmark's StatefulSets.
	targetsReady = 15 * time.Minute
	// runsPoll is how often the benchmark lists the runs to see which are done: a run's time is
	// late by up to that much.
	runsPoll = 500 * time.Millisecond
)

// BenchmarkTektonConcurrentRollouts creates N CustomRuns at once, each rolling its own
// StatefulSet of P Template pods (an app container and a sidecar) out through our CustomRun
// controller (one process, at its default API rate limit), in the rollout of
// test/integration/scale's concurrent benchmark: ten batches of a tenth each, a tenth down at
// once, a second's soak. N and P are $INPLACE_ROLLOUT_BENCH_ROLLOUTS and
// $INPLACE_ROLLOUT_BENCH_PODS (default 50 and 20). It reports the wall time from the first
// creation to the last run seen Succeeded, the controller's CPU over the runs, its peak RSS over
// them and its RSS at the end (/proc), its goroutines before and after (go_goroutines of its
// /metrics), and the runs' p50 and slowest duration (creation to Succeeded seen); it fails
// unless every run succeeded.
func BenchmarkTektonConcurrentRollouts(b *testing.B) {
	n, pods := benchstat.EnvCount(b, rolloutsEnv, defaultRollouts), benchstat.EnvCount(b, podsEnv, defaultPods)
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("web-%02d", i)
		}
		clitest.CreateStatefulSets(b, env, ns, names, int32(pods), targetsReady)
		before, goroutinesBefore := controllerUsage(b), controllerGoroutines(b)
		if err := procstat.ResetPeak(controller.PID()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		created := createRuns(b, ns, names)
		done := waitRunsDone(b, ns, names)
		b.StopTimer()
		after, goroutinesAfter := controllerUsage(b), controllerGoroutines(b)

		var failed []string
		durations, last := make([]time.Duration, 0, n), start
		for _, name := range names {
			d := done[name]
			durations = append(durations, d.at.Sub(created[name]))
			if d.at.After(last) {
				last = d.at
			}
			c := d.run.Status.GetCondition(apis.ConditionSucceeded)
			switch {
			case c == nil || c.Status != corev1.ConditionTrue:
				failed = append(failed, fmt.Sprintf("CustomRun %s/%s: %s", ns, name, condition(c)))
			default:
				if err := clitest.CheckRolledOut(env, ns, name, clitest.AppV2); err != nil {
					failed = append(failed, err.Error())
				}
			}
		}
		if len(failed) > 0 {
			b.Fatalf("%d of %d concurrent runs did not succeed:\n%s", len(failed), n, strings.Join(failed, "\n"))
		}
		wall := last.Sub(start)
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric((after.CPU - before.CPU).Seconds(), "controller-cpu-s")
		b.ReportMetric(benchstat.MiB(after.PeakRSS), "controller-peak-rss-MiB")
		b.ReportMetric(benchstat.MiB(after.RSS), "controller-rss-MiB")
		if goroutinesBefore >= 0 && goroutinesAfter >= 0 {
			b.ReportMetric(float64(goroutinesBefore), "controller-goroutines-before")
			b.ReportMetric(float64(goroutinesAfter), "controller-goroutines-after")
		}
		b.ReportMetric(benchstat.Percentile(durations, 50).Seconds(), "run-p50-s")
		b.ReportMetric(slices.Max(durations).Seconds(), "run-max-s")
		b.Logf("%d concurrent CustomRuns of %d pods through the controller: the last succeeded after %s; the controller used %s of CPU, peaked at %.0f MiB RSS",
			n, pods, wall.Round(10*time.Millisecond), after.CPU-before.CPU, benchstat.MiB(after.PeakRSS))
		benchstat.AppendSection(b, fmt.Sprintf("%d concurrent rollouts through the Tekton CustomRun controller", n),
			fmt.Sprintf("%d CustomRuns created at once, each rolling a StatefulSet of %d pods (an app container and a sidecar) out, all "+
				"succeeded through the controller (one process, at its default API rate limit); 10 batches of a tenth, a tenth down at "+
				"once, a second's soak. Times as seen by listing the runs every %s.", n, pods, runsPoll),
			[][2]string{
				{"wall time, first creation to the last success (s)", fmt.Sprintf("%.1f", wall.Seconds())},
				{"a run, creation to success, p50 / slowest (s)", fmt.Sprintf("%.1f / %.1f", benchstat.Percentile(durations, 50).Seconds(), slices.Max(durations).Seconds())},
				{"the controller's CPU over the runs (s)", fmt.Sprintf("%.1f", (after.CPU - before.CPU).Seconds())},
				{"its peak RSS over them, its RSS at the end (MiB)", fmt.Sprintf("%.0f, %.0f", benchstat.MiB(after.PeakRSS), benchstat.MiB(after.RSS))},
				{"its goroutines before and after", fmt.Sprintf("%d, %d", goroutinesBefore, goroutinesAfter)},
			})
	}
}

// createRuns creates a CustomRun NAME for each of names, all at once, each rolling StatefulSet
// NAME's app container out to AppV2, and returns when each was created.
func createRuns(b *testing.B, ns string, names []string) map[string]time.Time {
	b.Helper()
	client := dynamicClient(b).Resource(customRunsGVR).Namespace(ns)
	objs := make([]*unstructured.Unstructured, len(names))
	for i, name := range names {
		objs[i] = &unstructured.Unstructured{}
		manifest := fmt.Sprintf(`
apiVersion: tekton.dev/v1beta1
kind: CustomRun
metadata:
  name: %s
spec:
  customSpec:
    apiVersion: inplace-rollout.io/v1alpha1
    kind: InPlaceRollout
    spec: {target: {kind: StatefulSet, name: %s}, batches: ["10%%", "20%%", "30%%", "40%%", "50%%", "60%%", "70%%", "80%%", "90%%", "100%%"], maxUnavailable: "10%%", soak: 1s}
  params: [{name: images, value: ["app=%s"]}]
`, name, name, clitest.AppV2)
		if err := yaml.Unmarshal([]byte(manifest), &objs[i].Object); err != nil {
			b.Fatalf("decoding CustomRun %s: %v", name, err)
		}
	}
	var (
		mu      sync.Mutex
		created = map[string]time.Time{}
		errs    []error
		wg      sync.WaitGroup
	)
	for i, name := range names {
		wg.Go(func() {
			_, err := client.Create(context.Background(), objs[i], metav1.CreateOptions{})
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			created[name] = at
			if err != nil {
				errs = append(errs, fmt.Errorf("creating CustomRun %s/%s: %w", ns, name, err))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return created
}

// doneRun is a run as first seen done, and when.
type doneRun struct {
	at  time.Time
	run *v1beta1.CustomRun
}

// waitRunsDone lists the namespace's CustomRuns every runsPoll until each of names is done, for
// up to concurrentBound, and returns each as first seen done.
func waitRunsDone(b *testing.B, ns string, names []string) map[string]doneRun {
	b.Helper()
	client := tektonClient(b).TektonV1beta1().CustomRuns(ns)
	done := map[string]doneRun{}
	for start := time.Now(); len(done) < len(names); time.Sleep(runsPoll) {
		list, err := client.List(context.Background(), metav1.ListOptions{})
		at := time.Now()
		if err != nil {
			b.Logf("listing the CustomRuns of %s: %v", ns, err)
		} else {
			for i := range list.Items {
				r := &list.Items[i]
				if _, seen := done[r.Name]; !seen && r.IsDone() {
					done[r.Name] = doneRun{at, r}
				}
			}
		}
		if time.Since(start) > concurrentBound {
			var pending []string
			for _, name := range names {
				if _, ok := done[name]; !ok {
					pending = append(pending, name)
				}
			}
			b.Fatalf("%d of %d CustomRuns in %s still run after %s: %s", len(pending), len(names), ns, concurrentBound, strings.Join(pending, ", "))
		}
	}
	return done
}

func condition(c *apis.Condition) string {
	if c == nil {
		return "no Succeeded condition"
	}
	return fmt.Sprintf("Succeeded %s %s: %s", c.Status, c.Reason, c.Message)
}

func controllerUsage(b *testing.B) procstat.Usage {
	b.Helper()
	u, err := procstat.Read(controller.PID())
	if err != nil {
		b.Fatalf("the inplace-rollout tekton-controller: %v", err)
	}
	return u
}

// controllerGoroutines is the controller's go_goroutines, or -1 (logged) when its /metrics
// cannot be read.
func controllerGoroutines(b *testing.B) int {
	b.Helper()
	n, err := procstat.Goroutines(controller.HealthURL + "/metrics")
	if err != nil {
		b.Logf("the controller's goroutines are not reported: %v", err)
		return -1
	}
	return n
}
