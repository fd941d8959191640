package analysis_test

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The Prometheus credentials; tests check that the password never shows.
const (
	promUser     = "inplace"
	promPassword = "pw-7f3a91c2e5"
)

var (
	env *cluster.Cluster
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{
		Prometheus:          true,
		PrometheusBasicAuth: &cluster.BasicAuth{Username: promUser, Password: promPassword},
	}, &env, &cli))
}
