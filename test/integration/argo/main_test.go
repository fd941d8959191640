package argo_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests; Argo runs it as its plugins.
	cli string
	// argoCLI is kubectl-argo-rollouts, built by hack/tools.
	argoCLI string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the control plane with Prometheus, the audit log and Argo Rollouts, runs the tests
// and, when every test ran and passed, checks config/argo/clusterrole.yaml against the calls
// they made.
func run(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "inplace-rollout-argo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if cli, err = clitest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins, err := cluster.DefaultBinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	argoCLI = filepath.Join(bins, "kubectl-argo-rollouts")
	if _, err := os.Stat(argoCLI); err != nil {
		fmt.Fprintf(os.Stderr, "kubectl-argo-rollouts is missing: run `make tools` first: %v\n", err)
		return 1
	}

	opts := cluster.Options{Prometheus: true, AuditLog: true}
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
		keepArgoLog()
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
		}
	}()
	began := time.Now()
	if _, err := env.StartArgo(ctx, cluster.ArgoOptions{PluginBinary: cli}); err != nil {
		fmt.Fprintf(os.Stderr, "starting Argo Rollouts: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control plane ready in %s, Argo Rollouts in %s more\n",
		env.BootDuration.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	// The tests wait on the controller, not the CPU: run more of them at once than -parallel's
	// default, the number of cores, unless it was given.
	if !flagSet("test.parallel") {
		_ = flag.Set("test.parallel", "6")
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	// The role must match what ran: a subset of the tests would report the rules the others
	// need as spare.
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		fmt.Fprintln(os.Stderr, "the RBAC check of config/argo/clusterrole.yaml runs only when every test runs (no -run)")
		return code
	}
	beyond, err := checkRBAC(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "RBAC check of config/argo/clusterrole.yaml against the calls the tests made:\n%v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "RBAC check: config/argo/clusterrole.yaml grants exactly the calls the tests made beyond Argo's stock ClusterRole:\n  %s\n",
		strings.Join(beyond, "\n  "))
	return code
}

// keepArgoLog copies the controller's log, which the cluster directory's removal would lose, to
// $INPLACE_ROLLOUT_ARGO_LOG when set.
func keepArgoLog() {
	dst := os.Getenv("INPLACE_ROLLOUT_ARGO_LOG")
	if dst == "" || env == nil || env.Argo == nil {
		return
	}
	if data, err := os.ReadFile(env.Argo.LogPath); err == nil {
		_ = os.WriteFile(dst, data, 0o644)
	}
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
