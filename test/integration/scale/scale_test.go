package scale_test

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

var (
	env *cluster.Cluster
	cli string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	os.Exit(clitest.Main(m, cluster.Options{Simulator: kubeletsim.Config{Nodes: 10, Workers: 16}}, &env, &cli))
}

// BenchmarkStatefulSet500 rolls a 500-pod StatefulSet out in 10 batches of 10%, each batch all at
// once, with the simulator's default delays (200 ms pull, 200 ms start). The floor is the sum of
// those delays over the batches: 10 x 400 ms. It runs with the command's default client rate
// limit (100 requests/s) and with a higher one, since about 2000 writes at 100/s alone take 20 s.
func BenchmarkStatefulSet500(b *testing.B) {
	for _, bb := range []struct {
		name string
		args []string
	}{
		{"default-qps", nil},
		{"qps-1000", []string{"--kube-api-qps", "1000", "--kube-api-burst", "2000"}},
	} {
		b.Run(bb.name, func(b *testing.B) { rollOut500(b, bb.args) })
	}
}

func rollOut500(b *testing.B, extraArgs []string) {
	const replicas, batches = 500, 10
	for range b.N {
		b.StopTimer()
		ns := env.Namespace(b)
		name := "big"
		labels := map[string]string{"app": name}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](replicas), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1"}}}},
			},
		}
		if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		cluster.WaitFor(b, 5*time.Minute, "500 ready pods", func(ctx context.Context) (bool, error) {
			s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && s.Status.ReadyReplicas == replicas, err
		})

		writesBefore := writes(b)
		b.StartTimer()
		start := time.Now()
		args := append([]string{"run", "-n", ns, "--target", "statefulset/" + name, "--image", "app=registry.example/app:v2",
			"--batches", "10%,20%,30%,40%,50%,60%,70%,80%,90%,100%", "--max-unavailable", "10%"}, extraArgs...)
		cmd := exec.Command(cli, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		out, err := cmd.CombinedOutput()
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("run: %v\n%s", err, clitest.LastLines(string(out), 20))
		}
		// Counted while the CLI ran: the controllers write a little too (events, the
		// StatefulSet's own spec never), so these are an upper bound on the CLI's writes.
		w := since(writesBefore, writes(b))
		total := 0
		for _, n := range w {
			total += n
		}
		floor := batches * (env.Sim.Config().PullDelay + env.Sim.Config().StartDelay)
		maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(float64(w["pods"])/replicas, "pod-writes/pod")
		b.ReportMetric(float64(total)/replicas, "all-writes/pod")
		b.ReportMetric(float64(maxRSS)/1024, "peak-RSS-MiB")
		b.Logf("500 pods, 10 batches: %s wall, floor %s (%.1fx); writes per pod: %.2f to pods, %.2f in all (%v); CLI peak RSS %.1f MiB",
			wall.Round(10*time.Millisecond), floor, wall.Seconds()/floor.Seconds(), float64(w["pods"])/replicas, float64(total)/replicas, w, float64(maxRSS)/1024)
	}
}

// writes reads the apiserver's count of mutating requests (POST, PUT, PATCH, DELETE) by
// resource, leaving out subresources: pods/status is what the simulated kubelets write, and
// statefulsets/status the controller.
func writes(b *testing.B) map[string]int {
	b.Helper()
	data, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading apiserver metrics: %v", err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `subresource=""`) {
			continue
		}
		verb, resource := label(line, "verb"), label(line, "resource")
		if verb != "POST" && verb != "PUT" && verb != "PATCH" && verb != "DELETE" {
			continue
		}
		fields := strings.Fields(line)
		if n, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			out[resource] += int(n)
		}
	}
	return out
}

// label returns the value of a label in a Prometheus text exposition line.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}

// since returns the counts in after that are not in before.
func since(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
