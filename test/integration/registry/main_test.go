// Package registry tests the local control plane's OCI registries: images pushed with crane,
// pulled by the kubelet simulator as a runtime pulls them, and rollouts that resolve, pin and
// revert images by content through them.
package registry

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var (
	// env is the control plane shared by this package's tests; each test works in its own
	// namespace.
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests.
	cli string
)

// registryAuth guards env.PrivateRegistry.
var registryAuth = cluster.BasicAuth{Username: "puller", Password: "reg-Pa55word-7f3c"}

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{Registry: true, RegistryBasicAuth: &registryAuth}, &env, &cli))
}
