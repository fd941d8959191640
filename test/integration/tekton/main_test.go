package tekton_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// The Prometheus credentials; the analysis tests check that the password never shows.
const (
	promUser     = "inplace"
	promPassword = "pw-4c81d0b7aa"
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests; it runs as our CustomRun controller.
	cli string
	// controller is our CustomRun controller, a process authenticated as config/tekton's
	// ServiceAccount, bound only to its roles.
	controller *cluster.InplaceTekton
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the control plane with Prometheus, the audit log, the Tekton controller and ours,
// runs the tests and, when every test ran and passed, checks config/tekton's roles against the
// calls our controller made; then it stops them all.
func run(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "inplace-rollout-tekton-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if cli, err = clitest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := cluster.Options{
		Prometheus:          true,
		PrometheusBasicAuth: &cluster.BasicAuth{Username: promUser, Password: promPassword},
		AuditLog:            true,
		AuditUsers:          []string{cluster.InplaceTektonUser},
	}
	// The benchmarks run on test/integration/scale's simulated nodes, so that the concurrent
	// runs' figures stand beside the Argo plugin's there.
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		opts.Simulator = kubeletsim.Config{Nodes: 10, Workers: 16}
	}
	if os.Getenv("INPLACE_ROLLOUT_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err = cluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local control plane: %v\n", err)
		return 1
	}
	defer func() {
		keepTektonLog()
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
		}
	}()
	began := time.Now()
	if _, err := env.StartTekton(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "starting Tekton: %v\n", err)
		return 1
	}
	if controller, err = env.StartInplaceTekton(ctx, cli); err != nil {
		fmt.Fprintf(os.Stderr, "starting the inplace-rollout tekton-controller: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control plane ready in %s, Tekton in %s more\n",
		env.BootDuration.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		return code
	}
	// The roles must match what ran: a subset of the tests would report the rules the others
	// need as spare.
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		fmt.Fprintln(os.Stderr, "the RBAC check of config/tekton's roles runs only when every test runs (no -run)")
		return code
	}
	calls, err := controller.CheckRBAC(needs())
	if err != nil {
		fmt.Fprintf(os.Stderr, "RBAC check of config/tekton's roles against the calls our controller made:\n%v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "RBAC check: config/tekton's roles grant exactly the calls our controller made:\n  %s\n", strings.Join(calls, "\n  "))
	return code
}

// keepTektonLog copies the controllers' logs, which the cluster directory's removal would lose:
// Tekton's to $INPLACE_ROLLOUT_TEKTON_LOG, and ours, when StartInplaceTekton started it, to
// $INPLACE_ROLLOUT_TEKTON_CONTROLLER_LOG, each when set.
func keepTektonLog() {
	if env == nil {
		return
	}
	keep := func(dst, src string) {
		if dst == "" {
			return
		}
		if data, err := os.ReadFile(src); err == nil {
			_ = os.WriteFile(dst, data, 0o644)
		}
	}
	if env.Tekton != nil {
		keep(os.Getenv("INPLACE_ROLLOUT_TEKTON_LOG"), env.Tekton.LogPath)
	}
	if env.InplaceTekton != nil {
		keep(os.Getenv("INPLACE_ROLLOUT_TEKTON_CONTROLLER_LOG"), env.InplaceTekton.LogPath)
	}
}
