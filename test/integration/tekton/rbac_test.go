package tekton_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// checkRBAC compares config/tekton's ClusterRole and Role with the calls our controller's
// ServiceAccount made, and returns those calls. The controller has no other role, so every
// call must be granted and every rule used. The Role (the Lease) is namespaced to the
// controller's own namespace; the comparison, which does not tell namespaces apart, takes its
// rules with the ClusterRole's.
func checkRBAC(c *cluster.Cluster) (calls []string, err error) {
	audited, err := c.AuditedCalls(cluster.InplaceTektonUser)
	if err != nil {
		return nil, err
	}
	if len(audited) == 0 {
		return nil, errors.New("the audit log holds no call of " + cluster.InplaceTektonUser)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	clusterRole, err := cluster.ReadClusterRole(filepath.Join(root, "config", "tekton", "clusterrole.yaml"))
	if err != nil {
		return nil, err
	}
	role, err := cluster.ReadRole(filepath.Join(root, "config", "tekton", "role.yaml"))
	if err != nil {
		return nil, err
	}
	ours := slices.Concat(clusterRole.Rules, role.Rules)
	for c, n := range audited {
		calls = append(calls, fmt.Sprintf("%s x%d", c, n))
	}
	sort.Strings(calls)
	if problems := cluster.CompareRole(nil, "", ours, audited); len(problems) > 0 {
		return nil, fmt.Errorf("%s\nevery call of %s:\n  %s", strings.Join(problems, "\n"), cluster.InplaceTektonUser, strings.Join(calls, "\n  "))
	}
	return calls, nil
}
