package chaos_test

import (
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
	os.Exit(clitest.Main(m, cluster.Options{}, &env, &cli))
}
