package chaos_test

import (
	"flag"
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
	flag.Parse()
	// The drivers' tests wait on rollouts, not on the CPU, and each kills only its own driver:
	// run them at once, more of them than -parallel's default, the number of cores, unless it
	// was given.
	if !flagSet("test.parallel") {
		_ = flag.Set("test.parallel", "8")
	}
	os.Exit(clitest.Main(m, cluster.Options{}, &env, &cli))
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
