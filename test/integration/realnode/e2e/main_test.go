package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode"
)

// env is the control plane with the real node, shared by this package's tests; each test works
// in its own namespace. cli is the inplace-rollout binary.
var (
	env *cluster.Cluster
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if err := realnode.Prerequisites(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Stopping the cluster fails, and so does the run, unless the real node left the machine
	// as it found it (realnode.Node.Stop).
	return clitest.Main(m, cluster.Options{RealNode: true, Prometheus: true}, &env, &cli)
}

// full skips a test outside the whole real-node suite (make test-realnode), which make test
// runs in its short form.
func full(t *testing.T) {
	t.Helper()
	if os.Getenv("INPLACE_ROLLOUT_REAL_NODE_SUITE") != "full" {
		t.Skip("part of the whole real-node suite: make test-realnode")
	}
}
