package e2e

import (
	"fmt"
	"os"
	"strings"
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
	before := realnode.ReadMachine()
	code := clitest.Main(m, cluster.Options{RealNode: true, Prometheus: true}, &env, &cli)
	if diff := before.Diff(realnode.ReadMachine()); len(diff) > 0 {
		fmt.Fprintf(os.Stderr, "the real node left the machine changed:\n  %s\n", strings.Join(diff, "\n  "))
		code = 1
	}
	return code
}

// full skips a test outside the whole real-node suite (make test-realnode), which make test
// runs in its short form.
func full(t *testing.T) {
	t.Helper()
	if os.Getenv("INPLACE_ROLLOUT_REAL_NODE_SUITE") != "full" {
		t.Skip("part of the whole real-node suite: make test-realnode")
	}
}
