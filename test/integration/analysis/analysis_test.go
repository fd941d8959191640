package analysis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// writeConfig writes an analysis config for the test's Prometheus and returns its path.
// extra is appended YAML.
func writeConfig(t *testing.T, address, password, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`prometheus:
  address: %q
  basicAuth: {username: %q, password: %q}
interval: 1s
count: 2
window: 5s
%s`, address, promUser, password, extra)
	path := filepath.Join(t.TempDir(), "analysis.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newWeb creates a 4-replica StatefulSet and waits until Prometheus has seen its traffic for a
// full rate window (5s), so the pods not yet updated have data to compare with.
func newWeb(t *testing.T) string {
	t.Helper()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 4)
	time.Sleep(6 * time.Second)
	return ns
}

func runArgs(ns, image, config string, extra ...string) []string {
	return append([]string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + image,
		"--batches", "1,50%,100%", "--analysis", config}, extra...)
}

func lockOf(t *testing.T, ns string) *rollout.Record {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var l rollout.Record
	if err := json.Unmarshal([]byte(sts.Annotations[workload.LockAnnotation]), &l); err != nil {
		t.Fatalf("lock: %v", err)
	}
	return &l
}

// noSecret fails the test if the Prometheus password shows in the command's output, the
// workload's lock, or Events.
func noSecret(t *testing.T, ns string, outputs ...string) {
	t.Helper()
	for _, o := range outputs {
		if strings.Contains(o, promPassword) {
			t.Errorf("the password shows in the output:\n%s", o)
		}
	}
	if sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{}); err == nil {
		if strings.Contains(sts.Annotations[workload.LockAnnotation], promPassword) {
			t.Error("the password shows in the rollout lock")
		}
	}
	events, _ := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	for _, e := range events.Items {
		if strings.Contains(e.Message, promPassword) {
			t.Errorf("the password shows in event %s: %s", e.Reason, e.Message)
		}
	}
}

var analysisPassed = regexp.MustCompile(`msg="analysis passed".* batch=(\d+) .*queries=(\d+) took=(\S+)`)

func TestGoodImagePassesEveryBatch(t *testing.T) {
	ns := newWeb(t)
	r := clitest.Run(t, env, cli, runArgs(ns, clitest.AppV2, writeConfig(t, env.PrometheusURL, promPassword, ""))...)
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	if !strings.Contains(r.Stderr, "phase=Analyzing batch=1/3") {
		t.Errorf("no progress line in phase Analyzing for batch 1:\n%s", r.Stderr)
	}
	matches := analysisPassed.FindAllStringSubmatch(r.Stderr, -1)
	if len(matches) != 3 {
		t.Fatalf("%d batches passed their analysis, want 3:\n%s", len(matches), r.Stderr)
	}
	for _, m := range matches {
		t.Logf("batch %s: verdict %s after batch completion, %s Prometheus queries", m[1], m[3], m[2])
	}
	if l := lockOf(t, ns); l.Phase != rollout.PhaseSucceeded || l.AcceptedPods != 4 {
		t.Errorf("lock phase %s, pods accepted by analysis %d; want Succeeded and all 4", l.Phase, l.AcceptedPods)
	}
	status := clitest.Run(t, env, cli, "status", "-n", ns, "--target", "statefulset/web")
	if status.Code != 0 || !strings.Contains(status.Stdout, "analysis of batch 3: Pass") || !strings.Contains(status.Stdout, "errorRate Pass") ||
		!strings.Contains(status.Stdout, `query: sum(rate(http_requests_total{namespace="`+ns+`"`) {
		t.Errorf("status does not show the last analysis: %s", status)
	}
	noSecret(t, ns, r.Stdout, r.Stderr, status.Stdout)
}

func TestBadImagesFailTheirFirstBatch(t *testing.T) {
	tests := []struct {
		name, image, check string
	}{
		{"errors", "registry.example/app:errors-1", analysis.CheckErrorRate},
		{"latency", "registry.example/app:latency-1", analysis.CheckLatency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newWeb(t)
			r := clitest.Run(t, env, cli, runArgs(ns, tt.image, writeConfig(t, env.PrometheusURL, promPassword, ""))...)
			if r.Code != 1 || !strings.Contains(r.Stdout, "analysis of batch 1: Fail: "+tt.check+" Fail") {
				t.Fatalf("run: %s\nwant exit 1 with the %s check failing batch 1", r, tt.check)
			}
			touched := 0
			for _, p := range clitest.ListPods(t, env, ns, "app=web") {
				st, _ := inplace.ReadState(&p)
				if st == nil {
					continue
				}
				touched++
				if st.Stage != inplace.StageRolledBack || p.Spec.Containers[0].Image == tt.image {
					t.Errorf("pod %s: stage %s image %s, want RolledBack off %s", p.Name, st.Stage, p.Spec.Containers[0].Image, tt.image)
				}
			}
			if touched != 1 {
				t.Errorf("%d pods touched, want only batch 1's", touched)
			}
			if l := lockOf(t, ns); l.Phase != rollout.PhaseRolledBack {
				t.Errorf("lock phase %s, want RolledBack", l.Phase)
			}
		})
	}
}

// TestNoTrafficIsInconclusive switches the simulated traffic off: the traffic check is
// Inconclusive, never Pass, and --on-inconclusive decides: pause (the default, resumed by a
// command), fail (roll back) or continue.
func TestNoTrafficIsInconclusive(t *testing.T) {
	// Three workloads, one per choice, that Prometheus saw serving before the traffic stops.
	var pause, fail, cont string
	for _, ns := range []*string{&pause, &fail, &cont} {
		*ns = env.Namespace(t)
		clitest.CreateStatefulSet(t, env, *ns, "web", 4)
	}
	time.Sleep(6 * time.Second)
	env.Sim.SetTraffic(false)
	t.Cleanup(func() { env.Sim.SetTraffic(true) })
	time.Sleep(6 * time.Second) // the rate window drains
	config := writeConfig(t, env.PrometheusURL, promPassword, "")

	r := clitest.Run(t, env, cli, runArgs(pause, clitest.AppV2, config)...)
	if r.Code != 4 || !strings.Contains(r.Stdout, "traffic Inconclusive") || !strings.Contains(r.Stdout, "inplace-rollout resume") ||
		!strings.Contains(r.Stdout, "inplace-rollout rollback --target statefulset/web -n "+pause) {
		t.Fatalf("run: %s\nwant exit 4, paused on the traffic check with the ways to resume and to roll back", r)
	}
	if l := lockOf(t, pause); l.Phase != rollout.PhasePaused {
		t.Fatalf("lock phase %s, want Paused", l.Phase)
	}
	// Running again does not get past the pause by itself.
	if r := clitest.Run(t, env, cli, runArgs(pause, clitest.AppV2, config)...); r.Code != 4 {
		t.Fatalf("second run: %s; want exit 4", r)
	}

	r = clitest.Run(t, env, cli, runArgs(fail, clitest.AppV2, config, "--on-inconclusive", "fail")...)
	if r.Code != 1 || !strings.Contains(r.Stdout, "analysis of batch 1: Inconclusive") {
		t.Fatalf("run --on-inconclusive fail: %s\nwant exit 1, rolled back after batch 1", r)
	}
	if l := lockOf(t, fail); l.Phase != rollout.PhaseRolledBack {
		t.Errorf("--on-inconclusive fail: lock phase %s, want RolledBack", l.Phase)
	}

	r = clitest.Run(t, env, cli, runArgs(cont, clitest.AppV2, config, "--on-inconclusive", "continue")...)
	if r.Code != 0 {
		t.Fatalf("run --on-inconclusive continue: %s", r)
	}
	if l := lockOf(t, cont); l.Phase != rollout.PhaseSucceeded || l.AcceptedPods != 4 {
		t.Errorf("--on-inconclusive continue: lock phase %s, pods accepted by analysis %d; want Succeeded and all 4", l.Phase, l.AcceptedPods)
	}

	env.Sim.SetTraffic(true)
	time.Sleep(6 * time.Second)
	r = clitest.Run(t, env, cli, append([]string{"resume"}, runArgs(pause, clitest.AppV2, config)[1:]...)...)
	if r.Code != 0 {
		t.Fatalf("resume: %s", r)
	}
	for _, ns := range []string{pause, cont} {
		for _, p := range clitest.ListPods(t, env, ns, "app=web") {
			if p.Spec.Containers[0].Image != clitest.AppV2 {
				t.Errorf("pod %s/%s on %s at the end", ns, p.Name, p.Spec.Containers[0].Image)
			}
		}
	}
	noSecret(t, pause, r.Stdout, r.Stderr)
}

func TestPrometheusOutageNeverPasses(t *testing.T) {
	ns := newWeb(t)
	config := writeConfig(t, env.PrometheusURL, promPassword, "count: 20\nconsecutiveErrorLimit: 2\n")
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, runArgs(ns, clitest.AppV2, config)...)
	cluster.WaitFor(t, 60*time.Second, "the first analysis measurement", func(context.Context) (bool, error) {
		return strings.Contains(stderr.String(), `msg=measurement`), nil
	})
	restart, err := env.StopPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("restarting prometheus: %v", err)
		}
	})
	err = cmd.Wait()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("run ended with %v, want exit 1 (rolled back)\n%s", err, clitest.LastLines(stderr.String(), 20))
	}
	l := lockOf(t, ns)
	if l.Phase != rollout.PhaseRolledBack || !strings.Contains(l.Message, "Error") || !strings.Contains(l.Message, env.PrometheusURL) {
		t.Errorf("lock %s: %s; want RolledBack on an Error naming %s", l.Phase, l.Message, env.PrometheusURL)
	}
	if strings.Contains(stderr.String(), "analysis passed") {
		t.Error("an analysis passed while Prometheus was down")
	}
	errorsSeen := strings.Count(stderr.String(), "verdict=Error")
	t.Logf("%d Error measurements before the rollback", errorsSeen)
	if errorsSeen == 0 {
		t.Error("no Error measurement was reported")
	}
}

func TestUnreachableOrUnauthorizedPrometheusChangesNothing(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 2)
	closed := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(promPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenConfig := filepath.Join(t.TempDir(), "token.yaml")
	if err := os.WriteFile(tokenConfig, []byte(fmt.Sprintf("prometheus: {address: %q, bearerTokenFile: %q}\n", env.PrometheusURL, tokenFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, config string
		want         []string
	}{
		{"wrong address", writeConfig(t, closed, promPassword, ""), []string{closed, "connection refused"}},
		{"wrong password", writeConfig(t, env.PrometheusURL, "not-"+promPassword, ""), []string{env.PrometheusURL, "HTTP 401"}},
		{"bearer token", tokenConfig, []string{env.PrometheusURL, "HTTP 401"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts, _ := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
			r := clitest.Run(t, env, cli, runArgs(ns, clitest.AppV2, tt.config)...)
			if r.Code != 2 {
				t.Fatalf("run: %s; want exit 2", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("error does not name %q:\n%s", w, r.Stderr)
				}
			}
			after, _ := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
			if after.ResourceVersion != sts.ResourceVersion {
				t.Error("the StatefulSet was written")
			}
			noSecret(t, ns, r.Stdout, r.Stderr)
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestKilledDuringAnalysisContinuesTheSameRun kills the command in the middle of a batch's
// analysis: the analysis lives on the workload's lock, so the next run continues it rather
// than starting over.
func TestKilledDuringAnalysisContinuesTheSameRun(t *testing.T) {
	ns := newWeb(t)
	config := writeConfig(t, env.PrometheusURL, promPassword, "count: 4\n")
	args := runArgs(ns, clitest.AppV2, config)
	cmd := clitest.Start(t, env, cli, nil, args...)
	var started time.Time
	var measured int
	cluster.WaitFor(t, 60*time.Second, "two measurements of batch 1", func(context.Context) (bool, error) {
		run := runOf(t, ns)
		if run == nil || run.Batch != 1 {
			return false, nil
		}
		started = run.StartedAt
		if c := run.Counts[analysis.CheckTraffic]; c != nil {
			measured = c.Measured
		}
		return measured >= 2, nil
	})
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	r := clitest.Run(t, env, cli, args...)
	if r.Code != 0 {
		t.Fatalf("run after the kill: %s", r)
	}
	// The engine's lines name the workload and the rollout before their own attributes. The
	// resumed run starts the analyses of batches 2 and 3, never batch 1's again.
	startedRe := regexp.MustCompile(`msg="analysis started" namespace=` + regexp.QuoteMeta(ns) + ` workload=StatefulSet/web rolloutID=\S+ batch=(\d+) `)
	var batches []string
	for _, m := range startedRe.FindAllStringSubmatch(r.Stderr, -1) {
		batches = append(batches, m[1])
	}
	if !slices.Equal(batches, []string{"2", "3"}) {
		t.Errorf("the resumed run started the analyses of batches %v, want [2 3]: batch 1's goes on:\n%s", batches, clitest.LastLines(r.Stderr, 30))
	}
	m := analysisPassed.FindStringSubmatch(r.Stderr)
	if m == nil || m[1] != "1" {
		t.Fatalf("the resumed run did not finish batch 1's analysis:\n%s", clitest.LastLines(r.Stderr, 30))
	}
	t.Logf("batch 1's analysis started at %s, survived a kill after %d measurements, and passed %s after it started", started.Format(time.TimeOnly), measured, m[3])
}

// runOf returns the analysis run on the workload's lock, or nil.
func runOf(t *testing.T, ns string) *analysis.Run {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || sts.Annotations[workload.LockAnnotation] == "" {
		return nil // not started yet
	}
	l := lockOf(t, ns)
	if len(l.Analysis) == 0 {
		return nil
	}
	var r analysis.Run
	if err := json.Unmarshal(l.Analysis, &r); err != nil {
		t.Fatalf("analysis on the lock: %v", err)
	}
	return &r
}
