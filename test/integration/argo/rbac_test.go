package argo_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// checkRBAC compares config/argo/clusterrole.yaml with the calls the argo-rollouts
// ServiceAccount made that Argo's stock ClusterRole does not grant, and returns those calls.
func checkRBAC(c *cluster.Cluster) (beyondStock []string, err error) {
	calls, err := c.AuditedCalls(cluster.ArgoUser)
	if err != nil {
		return nil, err
	}
	if len(calls) == 0 {
		return nil, errors.New("the audit log holds no call of " + cluster.ArgoUser)
	}
	stock, err := cluster.ArgoStockClusterRole(c.Argo.ModuleDir)
	if err != nil {
		return nil, err
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	ours, err := cluster.ReadClusterRole(filepath.Join(root, "config", "argo", "clusterrole.yaml"))
	if err != nil {
		return nil, err
	}
	if problems := cluster.CompareRole(stock.Rules, "Argo's stock ClusterRole", ours.Rules, calls); len(problems) > 0 {
		var all []string
		for c, n := range calls {
			all = append(all, fmt.Sprintf("  %s x%d (stock grants it: %v)", c, n, cluster.Allowed(stock.Rules, c)))
		}
		sort.Strings(all)
		return nil, fmt.Errorf("%s\nevery call of %s:\n%s", strings.Join(problems, "\n"), cluster.ArgoUser, strings.Join(all, "\n"))
	}
	for c, n := range calls {
		if !cluster.Allowed(stock.Rules, c) {
			beyondStock = append(beyondStock, fmt.Sprintf("%s x%d", c, n))
		}
	}
	sort.Strings(beyondStock)
	return beyondStock, nil
}
