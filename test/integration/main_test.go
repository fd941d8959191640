package integration

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// env is the control plane shared by this package's tests; each test works in its own namespace.
var env *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.RunTests(m, cluster.Options{Prometheus: true}, &env))
}
