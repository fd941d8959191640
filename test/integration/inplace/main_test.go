package inplace_test

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(cluster.RunTests(m, cluster.Options{}, &env))
}
