// Package prepull tests pre-pull end to end: the command's puller pods on a control plane whose
// kubelets take 2 s to pull an image from the local registry.
package prepull

import (
	"os"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// env is the control plane shared by this package's tests; each test works in its own namespace.
var env *cluster.Cluster

// cli is the inplace-rollout command, built for the tests.
var cli string

// pullDelay is how long a kubelet of the control plane takes to pull an image it does not have.
const pullDelay = 2 * time.Second

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{Registry: true, Simulator: kubeletsim.Config{PullDelay: pullDelay}}, &env, &cli))
}
