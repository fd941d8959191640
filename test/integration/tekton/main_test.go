package tekton_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the control plane and the Tekton controller, runs the tests and stops both.
func run(m *testing.M) int {
	opts := cluster.Options{}
	if os.Getenv("INPLACE_ROLLOUT_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var err error
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
	fmt.Fprintf(os.Stderr, "control plane ready in %s, Tekton in %s more\n",
		env.BootDuration.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	return m.Run()
}

// keepTektonLog copies the controller's log, which the cluster directory's removal would lose,
// to $INPLACE_ROLLOUT_TEKTON_LOG when set.
func keepTektonLog() {
	dst := os.Getenv("INPLACE_ROLLOUT_TEKTON_LOG")
	if dst == "" || env == nil || env.Tekton == nil {
		return
	}
	if data, err := os.ReadFile(env.Tekton.LogPath); err == nil {
		_ = os.WriteFile(dst, data, 0o644)
	}
}
