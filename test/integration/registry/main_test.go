// Package registry tests the local control plane's OCI registries: images pushed with crane,
// pulled by the kubelet simulator as a runtime pulls them.
package registry

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// env is the control plane shared by this package's tests; each test works in its own namespace.
var env *cluster.Cluster

// registryAuth guards env.PrivateRegistry.
var registryAuth = cluster.BasicAuth{Username: "puller", Password: "reg-Pa55word-7f3c"}

func TestMain(m *testing.M) {
	os.Exit(cluster.RunTests(m, cluster.Options{Registry: true, RegistryBasicAuth: &registryAuth}, &env))
}
