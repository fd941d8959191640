package scale_test

import (
	"flag"
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

var (
	env *cluster.Cluster
	cli string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	os.Exit(clitest.Main(m, cluster.Options{Simulator: kubeletsim.Config{Nodes: 10, Workers: 16}}, &env, &cli))
}

// since returns the counts in after that are not in before.
func since(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
