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
	byNamespace, err := c.AuditedCallsByNamespace(cluster.ArgoUser)
	if err != nil {
		return nil, err
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
	problems := cluster.CompareRole(stock.Rules, "Argo's stock ClusterRole", ours.Rules, calls)
	byTest := cluster.CallsByTest(byNamespace)
	problems = append(problems, cluster.CheckNeeds(ours.Rules, needs(), byTest)...)
	if len(problems) > 0 {
		var all []string
		for c, n := range calls {
			all = append(all, fmt.Sprintf("  %s x%d (stock grants it: %v)", c, n, cluster.Allowed(stock.Rules, c)))
		}
		sort.Strings(all)
		return nil, fmt.Errorf("%s\nevery call of %s:\n%s\nby test (its namespaces) or namespace:\n%s",
			strings.Join(problems, "\n"), cluster.ArgoUser, strings.Join(all, "\n"), cluster.FormatOpCalls(byTest))
	}
	for c, n := range calls {
		if !cluster.Allowed(stock.Rules, c) {
			beyondStock = append(beyondStock, fmt.Sprintf("%s x%d", c, n))
		}
	}
	sort.Strings(beyondStock)
	return append(beyondStock, "each grant, and the tests that break without it:", cluster.FormatNeeds(needs())), nil
}

// needs names, for each grant of config/argo/clusterrole.yaml, the tests (as
// cluster.CallsByTest names them: by their namespaces) whose rollouts make the call the grant
// allows, and so break without it.
func needs() []cluster.Need {
	need := cluster.NeedIn
	const (
		statefulSet = "teststeprollsastatefulsetinplace"
		daemonSet   = "testexamples-daemonset"
		deployment  = "teststeprollsadeploymentinplace"
		pods        = "teststeprollslabelselectedpodsinplace"
		prePull     = "teststepprepulls"
		gated       = "teststepdrainsgatedpods"
		// Namespace cuts a test's name at 50 characters.
		resizedByConfig   = "teststepresizesinplace-resources-in-the-step-s-con"
		resizedByTemplate = "teststepresizesinplace-resources-from-the-rollout"
	)
	// A pod is read again when a write meets a conflict, which any rollout may meet (a
	// kubelet's status update, Argo's own writes); the tests do not provoke it, so any of those
	// that roll pods may make the call.
	podWriters := []string{statefulSet, daemonSet, deployment, pods, prePull, gated,
		"testexamples-statefulset", "testexamples-traffic", "testexamples-holds-with-analysis",
		"testrolloutsurvives-the-controller-restarted", "testrolloutsurvives-the-plugin-process-killed",
		"teststepabortaftertwoholdsrollsbackonce", "teststepabortmidbatchrollsback", "teststepabortsurvivespluginkilled",
		"teststepanalysistemplatefailsandrollsback", "teststepcrashfailsandrollsback", "teststepretryafterabort",
		"teststeptworolloutsownprometheuscredentials", "teststepuptothenpause",
		"testtrafficfullpromotion", "testtrafficsentinelbycanaryscale", "testtrafficweightsthenabort"}
	return []cluster.Need{
		need("get", "apps", "statefulsets", "", statefulSet),
		need("patch", "apps", "statefulsets", "", statefulSet),
		need("get", "apps", "daemonsets", "", daemonSet),
		need("patch", "apps", "daemonsets", "", daemonSet),
		need("list", "apps", "controllerrevisions", "", daemonSet),
		need("get", "", "pods", "", podWriters...),
		need("patch", "", "pods", "", statefulSet),
		need("create", "", "pods", "", prePull),
		need("delete", "", "pods", "", prePull),
		need("get", "", "serviceaccounts", "", statefulSet),
		need("patch", "", "pods", "status", gated),
		need("patch", "", "pods", "resize", resizedByConfig, resizedByTemplate),
		need("patch", "apps", "deployments", "", deployment),
		need("create", "events.k8s.io", "events", "", statefulSet),
		// The scan for the workloads of deleted Rollouts lists them over the whole cluster.
		{Call: cluster.APICall{APIGroup: "apps", Resource: "statefulsets", Verb: "list"}, Ops: []string{"cluster-wide"}},
		{Call: cluster.APICall{APIGroup: "apps", Resource: "daemonsets", Verb: "list"}, Ops: []string{"cluster-wide"}},
		need("create", "", "configmaps", "", pods),
		need("update", "", "configmaps", "", pods),
		need("delete", "", "configmaps", "", pods),
	}
}
