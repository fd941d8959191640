package controller_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// checkRBAC compares config/controller's roles with the calls the controller made, from the
// audit log: every call allowed, every rule used. It returns the calls, with their counts.
func checkRBAC(c *cluster.Cluster) (calls []string, err error) {
	audited, err := c.AuditedCalls(cluster.InplaceControllerUser)
	if err != nil {
		return nil, err
	}
	if len(audited) == 0 {
		return nil, errors.New("the audit log holds no call of " + cluster.InplaceControllerUser)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	clusterRole, err := cluster.ReadClusterRole(filepath.Join(root, "config", "controller", "clusterrole.yaml"))
	if err != nil {
		return nil, err
	}
	role, err := cluster.ReadRole(filepath.Join(root, "config", "controller", "role.yaml"))
	if err != nil {
		return nil, err
	}
	for c, n := range audited {
		calls = append(calls, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(calls)
	byNamespace, err := c.AuditedCallsByNamespace(cluster.InplaceControllerUser)
	if err != nil {
		return nil, err
	}
	ours := slices.Concat(clusterRole.Rules, role.Rules)
	problems := cluster.CompareRole(nil, "", ours, audited)
	byTest := cluster.CallsByTest(byNamespace)
	problems = append(problems, cluster.CheckNeeds(ours, needs(), byTest)...)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s\nevery call of %s, by test (its namespaces) or namespace:\n%s", strings.Join(problems, "\n"), cluster.InplaceControllerUser, cluster.FormatOpCalls(byTest))
	}
	return append(calls, "each grant, and the tests that break without it:", cluster.FormatNeeds(needs())), nil
}

// needs names, for each grant of config/controller's roles, the tests (as cluster.CallsByTest
// names them: by their namespaces) whose rollouts make the call the grant allows, and so break
// without it; "cluster-wide" is the controller's informer, and inplace-rollout-system its Lease
// and the webhook's Secret.
func needs() []cluster.Need {
	need := cluster.NeedIn
	clusterWide := cluster.NeedClusterWide
	const (
		statefulSet = "testapplyrollsstatefulsetinplace"
		daemonSet   = "testrollseachkind-daemonset"
		deployment  = "testrollseachkind-deployment-with-prepull"
		// Namespace cuts a test's name at 50 characters.
		gatedPods = "testrollseachkind-gated-pods--then-a-second-select"
		system    = "inplace-rollout-system"
	)
	return []cluster.Need{
		clusterWide("list", "inplace-rollout.io", "inplacerollouts"),
		clusterWide("watch", "inplace-rollout.io", "inplacerollouts"),
		need("update", "inplace-rollout.io", "inplacerollouts", "", statefulSet),
		need("update", "inplace-rollout.io", "inplacerollouts", "status", statefulSet),
		need("create", "events.k8s.io", "events", "", statefulSet),
		need("get", "apps", "statefulsets", "", statefulSet),
		need("patch", "apps", "statefulsets", "", statefulSet),
		need("get", "apps", "daemonsets", "", daemonSet),
		need("patch", "apps", "daemonsets", "", daemonSet),
		need("list", "apps", "controllerrevisions", "", daemonSet),
		need("get", "apps", "deployments", "", deployment),
		need("patch", "apps", "deployments", "", deployment),
		need("list", "apps", "replicasets", "", deployment),
		need("patch", "apps", "replicasets", "", deployment),
		// A pod is read again only when a write meets a conflict, which these tests provoke
		// with ChurnPods.
		need("get", "", "pods", "", daemonSet, deployment, gatedPods),
		need("list", "", "pods", "", statefulSet),
		need("patch", "", "pods", "", statefulSet),
		need("create", "", "pods", "", deployment),
		need("delete", "", "pods", "", deployment),
		need("get", "", "serviceaccounts", "", statefulSet),
		need("patch", "", "pods", "status", gatedPods),
		need("get", "", "configmaps", "", gatedPods),
		need("list", "", "configmaps", "", gatedPods),
		need("create", "", "configmaps", "", gatedPods),
		need("update", "", "configmaps", "", gatedPods),
		need("delete", "", "configmaps", "", gatedPods),
		// The webhook's Secret, read as the controller starts.
		need("get", "", "secrets", "", system),
		need("get", "coordination.k8s.io", "leases", "", system),
		need("create", "coordination.k8s.io", "leases", "", system),
		need("update", "coordination.k8s.io", "leases", "", system),
	}
}
