// Package helm tests the Helm chart charts/inplace-rollout with the real helm (hack/tools/helm):
// lint, templates against golden files, values refused by its schema, an install into the local
// control plane with a rollout through what it installed, and an uninstall that leaves nothing;
// and the values for Argo's own Helm chart in config/argo/helm-values.yaml.
package helm

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// env is the local control plane; cli the inplace-rollout binary, which runs as the controller
// the chart installs.
var (
	env *cluster.Cluster
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{}, &env, &cli))
}
