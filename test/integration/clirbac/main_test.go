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

// The Prometheus credentials the analysis reads from a Secret; the test checks that the
// password never shows.
const (
	promUser     = "inplace"
	promPassword = "pw-5c1e8d40b9"
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests.
	cli string
)

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, cluster.Options{
		AuditLog:            true,
		AuditUsers:          []string{cliUser},
		Prometheus:          true,
		PrometheusBasicAuth: &cluster.BasicAuth{Username: promUser, Password: promPassword},
	}, &env, &cli))
}
