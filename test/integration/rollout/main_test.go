// Package rollout_test runs the inplace-rollout command against real workload controllers.
package rollout_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests.
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "inplace-rollout-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if cli, err = clitest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return cluster.RunTests(m, cluster.Options{}, &env)
}
