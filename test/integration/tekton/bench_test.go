package tekton_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"

	"github.com/inplace-rollout/inplace-rollout/test/integration/benchstat"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// benchPods is the StatefulSet the latency benchmark rolls out, one pod per batch.
const benchPods = 5

// BenchmarkCustomRunLatency times our controller's reactions, as a person watching a run sees
// them: from the CustomRun's creation to Succeeded=Unknown (the run started), and from a pod
// becoming Ready on the new image to the run's extraFields counting it. The rollout takes one
// pod per batch with no soak, so every pod ends a batch. It reports the controller's RSS after.
func BenchmarkCustomRunLatency(b *testing.B) {
	var starts, counts []time.Duration
	for i := range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		clitest.CreateStatefulSet(b, env, ns, "web", benchPods)
		ctx, cancel := context.WithTimeout(context.Background(), rolloutTimeout)
		events := watchEvents(b, ctx, ns)
		name := fmt.Sprintf("bench-%d", i)
		b.StartTimer()
		created := time.Now()
		createRun(b, ns, name, `{target: {kind: StatefulSet, name: web}, batches: [1, 2, 3, 4, "100%"]}`, `[{name: images, value: ["app=`+clitest.AppV2+`"]}]`)
		run := waitRun(b, ns, name, "done", isDone)
		b.StopTimer()
		if c := run.Status.GetCondition(apis.ConditionSucceeded); c.Status != corev1.ConditionTrue {
			b.Fatalf("CustomRun %s/%s: Succeeded %s %s: %s", ns, name, c.Status, c.Reason, c.Message)
		}
		cancel()
		start, perPod := events.latencies(b, created)
		starts = append(starts, start)
		counts = append(counts, perPod...)
	}
	slices.Sort(counts)
	b.ReportMetric(ms(slices.Max(starts)), "create-to-started-ms")
	b.ReportMetric(ms(counts[len(counts)/2]), "ready-to-counted-p50-ms")
	b.ReportMetric(ms(counts[len(counts)-1]), "ready-to-counted-max-ms")
	rss, hwm := controllerMemory(b)
	b.ReportMetric(rss, "controller-rss-MiB")
	b.ReportMetric(hwm, "controller-peak-rss-MiB")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runEvents are the times the test saw the run and the pods change, as they arrived.
type runEvents struct {
	mu sync.Mutex
	// startedAt is when the run was first seen started; countedAt[n] when its progress first
	// counted n pods updated.
	startedAt time.Time
	countedAt map[int]time.Time
	// readyAt is when each pod was first seen Ready on the new image.
	readyAt map[string]time.Time
}

// watchEvents watches the namespace's CustomRuns and pods until ctx ends.
func watchEvents(b *testing.B, ctx context.Context, ns string) *runEvents {
	b.Helper()
	ev := &runEvents{countedAt: map[int]time.Time{}, readyAt: map[string]time.Time{}}
	runs, err := tektonClient(b).TektonV1beta1().CustomRuns(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pods, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	go ev.consume(runs, func(obj any, at time.Time) {
		run, ok := obj.(*v1beta1.CustomRun)
		if !ok {
			return
		}
		if c := run.Status.GetCondition(apis.ConditionSucceeded); c != nil && ev.startedAt.IsZero() {
			ev.startedAt = at
		}
		var p struct{ Updated *int }
		if run.Status.DecodeExtraFields(&p) == nil && p.Updated != nil {
			n := *p.Updated
			if _, seen := ev.countedAt[n]; !seen {
				ev.countedAt[n] = at
			}
		}
	})
	go ev.consume(pods, func(obj any, at time.Time) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		cs := cluster.ContainerStatus(pod, "app")
		if _, seen := ev.readyAt[pod.Name]; !seen && cs != nil && cs.Image == clitest.AppV2 && cluster.PodReady(pod) {
			ev.readyAt[pod.Name] = at
		}
	})
	return ev
}

func (ev *runEvents) consume(w watch.Interface, record func(obj any, at time.Time)) {
	for e := range w.ResultChan() {
		at := time.Now()
		ev.mu.Lock()
		record(e.Object, at)
		ev.mu.Unlock()
	}
}

// latencies are the time from created to the run started, and for each pod, in the order they
// became Ready on the new image, the time until the run counted that many pods updated.
func (ev *runEvents) latencies(b *testing.B, created time.Time) (time.Duration, []time.Duration) {
	b.Helper()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.startedAt.IsZero() || len(ev.readyAt) != benchPods {
		b.Fatalf("saw the run start at %v and %d pods Ready on the new image, want the start and %d", ev.startedAt, len(ev.readyAt), benchPods)
	}
	ready := make([]time.Time, 0, len(ev.readyAt))
	for _, at := range ev.readyAt {
		ready = append(ready, at)
	}
	slices.SortFunc(ready, func(a, c time.Time) int { return a.Compare(c) })
	var out []time.Duration
	for i, at := range ready {
		counted, ok := ev.countedAt[i+1]
		if !ok {
			b.Fatalf("the run never counted %d pods updated (counts seen: %v)", i+1, ev.countedAt)
		}
		out = append(out, max(counted.Sub(at), 0))
	}
	return ev.startedAt.Sub(created), out
}

// controllerMemory is the controller process's resident memory now and at its peak, in MiB.
func controllerMemory(b *testing.B) (rss, peak float64) {
	b.Helper()
	u := controllerUsage(b)
	return benchstat.MiB(u.RSS), benchstat.MiB(u.PeakRSS)
}
