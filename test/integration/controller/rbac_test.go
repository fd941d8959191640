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
	if problems := cluster.CompareRole(nil, "", slices.Concat(clusterRole.Rules, role.Rules), audited); len(problems) > 0 {
		return nil, fmt.Errorf("%s\nevery call of %s:\n  %s", strings.Join(problems, "\n"), cluster.InplaceControllerUser, strings.Join(calls, "\n  "))
	}
	return calls, nil
}
