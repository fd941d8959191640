package clirbac_test

import (
	"os"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// The namespace the command runs in, as the ServiceAccount it runs as: the audit policy names
// the user before the cluster starts.
const (
	namespace      = "inplace-rollout-cli-rbac"
	serviceAccount = "deployer"
	cliUser        = "system:serviceaccount:" + namespace + ":" + serviceAccount
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests.
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{AuditLog: true, AuditUsers: []string{cliUser}}, &env, &cli))
}
