package prepull

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// BenchmarkNotReadyWindow measures how long each pod is not Ready during an in-place rollout of
// 4 pods, with and without --pre-pull, on kubelets that take pullDelay to pull: from the pods'
// Ready condition as a watch sees it turn False and True again.
func BenchmarkNotReadyWindow(b *testing.B) {
	for _, prePull := range []bool{false, true} {
		b.Run(fmt.Sprintf("pre-pull=%v", prePull), func(b *testing.B) {
			var windows []time.Duration
			for i := range b.N {
				ns := env.Namespace(b)
				repo := env.Registry + "/" + ns + "/app" // its own repository: nodes keep what earlier tests pulled by tag
				push(b, repo+":v1")
				tag := fmt.Sprintf("%s:bench-%v-%d", repo, prePull, i)
				push(b, tag)
				statefulSet(b, ns, "web", repo+":v1", 4)
				args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + tag, "--batches", "1,50%,100%", "--timeout", "2m"}
				if prePull {
					args = append(args, "--pre-pull")
				}
				w := watchReady(b, ns)
				r := clitest.Run(b, env, cli, args...)
				if r.Code != 0 {
					b.Fatalf("run: %s", r)
				}
				windows = append(windows, w.stop()...)
			}
			if len(windows) == 0 {
				b.Fatal("no pod went not Ready: nothing measured")
			}
			slices.Sort(windows)
			b.ReportMetric(windows[len(windows)/2].Seconds(), "p50-not-ready-s")
			b.ReportMetric(windows[len(windows)-1].Seconds(), "max-not-ready-s")
		})
	}
}

// readyWatch records, per pod, when a watch saw its Ready condition turn False and True again.
type readyWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	down    map[string]time.Time
	windows []time.Duration
}

func watchReady(b *testing.B, ns string) *readyWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	rw := &readyWatch{cancel: cancel, done: make(chan struct{}), down: map[string]time.Time{}}
	go func() {
		defer close(rw.done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			ready := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}
			rw.mu.Lock()
			since, isDown := rw.down[p.Name]
			switch {
			case !ready && !isDown:
				rw.down[p.Name] = time.Now()
			case ready && isDown:
				rw.windows = append(rw.windows, time.Since(since))
				delete(rw.down, p.Name)
			}
			rw.mu.Unlock()
		}
	}()
	return rw
}

// stop ends the watch and returns the windows it measured.
func (rw *readyWatch) stop() []time.Duration {
	rw.cancel()
	<-rw.done
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.windows
}
