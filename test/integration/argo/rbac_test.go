package argo_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// grant is one verb on one resource (resource/subresource) of one API group, as a rule gives it.
type grant struct {
	group, resource, verb string
}

func (g grant) String() string {
	group := g.group
	if group == "" {
		group = `""`
	}
	return fmt.Sprintf("{apiGroups: [%s], resources: [%s], verbs: [%s]}", group, g.resource, g.verb)
}

// resourceOf is how RBAC names a call's resource: resource or resource/subresource.
func resourceOf(c cluster.APICall) string {
	if c.Subresource != "" {
		return c.Resource + "/" + c.Subresource
	}
	return c.Resource
}

// matches reports whether rule grants call, wildcards included.
func matches(rule rbacv1.PolicyRule, call cluster.APICall) bool {
	in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	res := resourceOf(call)
	resOK := in(rule.Resources, res) ||
		(call.Subresource != "" && (slices.Contains(rule.Resources, "*/"+call.Subresource) || slices.Contains(rule.Resources, call.Resource+"/*")))
	return len(rule.ResourceNames) == 0 && in(rule.APIGroups, call.APIGroup) && resOK && in(rule.Verbs, call.Verb)
}

func allowed(rules []rbacv1.PolicyRule, call cluster.APICall) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return matches(r, call) })
}

// grants expands rules into single grants, for naming a spare one.
func grants(rules []rbacv1.PolicyRule) []grant {
	var out []grant
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, grant{g, res, v})
				}
			}
		}
	}
	return out
}

// compareRole checks that ours grants exactly the calls that stock does not: each such call
// must be granted (else a rule is missing), and each grant of ours must serve one of them (else
// it is spare). Every problem is named.
func compareRole(stock, ours []rbacv1.PolicyRule, calls map[cluster.APICall]int) []string {
	var needed []cluster.APICall
	for c := range calls {
		if !allowed(stock, c) {
			needed = append(needed, c)
		}
	}
	var problems []string
	for _, c := range needed {
		if !allowed(ours, c) {
			problems = append(problems, fmt.Sprintf("missing rule: %s was called %d times, and neither Argo's stock ClusterRole nor ours grants it; add %s",
				c, calls[c], grant{c.APIGroup, resourceOf(c), c.Verb}))
		}
	}
	for _, g := range grants(ours) {
		used := slices.ContainsFunc(needed, func(c cluster.APICall) bool {
			return matches(rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}}, c)
		})
		if !used {
			problems = append(problems, fmt.Sprintf("spare rule: %s is granted, but no call beyond Argo's stock ClusterRole used it; remove it", g))
		}
	}
	sort.Strings(problems)
	return problems
}

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
	if problems := compareRole(stock.Rules, ours.Rules, calls); len(problems) > 0 {
		var all []string
		for c, n := range calls {
			all = append(all, fmt.Sprintf("  %s x%d (stock grants it: %v)", c, n, allowed(stock.Rules, c)))
		}
		sort.Strings(all)
		return nil, fmt.Errorf("%s\nevery call of %s:\n%s", strings.Join(problems, "\n"), cluster.ArgoUser, strings.Join(all, "\n"))
	}
	for c, n := range calls {
		if !allowed(stock.Rules, c) {
			beyondStock = append(beyondStock, fmt.Sprintf("%s x%d", c, n))
		}
	}
	sort.Strings(beyondStock)
	return beyondStock, nil
}

// TestCompareRole checks the comparison itself, without a cluster, so that the RBAC check
// cannot pass by comparing nothing.
func TestCompareRole(t *testing.T) {
	stock := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}}
	getPods := cluster.APICall{Resource: "pods", Verb: "get", Namespaced: true}
	listPods := cluster.APICall{Resource: "pods", Verb: "list", Namespaced: true}
	patchSts := cluster.APICall{APIGroup: "apps", Resource: "statefulsets", Verb: "patch", Namespaced: true}
	resize := cluster.APICall{Resource: "pods", Subresource: "resize", Verb: "patch", Namespaced: true}
	tests := []struct {
		name  string
		ours  []rbacv1.PolicyRule
		calls []cluster.APICall
		want  []string // substrings, one per problem
	}{
		{"exact", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"patch"}},
		}, []cluster.APICall{getPods, listPods, patchSts}, nil},
		{"missing", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}, []cluster.APICall{getPods, patchSts}, []string{"missing rule: patch statefulsets.apps"}},
		{"spare", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete"}},
		}, []cluster.APICall{getPods}, []string{"spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [delete]}"}},
		{"granted by stock is spare in ours", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		}, []cluster.APICall{listPods}, []string{"spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [list]}"}},
		{"subresource is its own resource", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		}, []cluster.APICall{resize}, []string{"missing rule: patch pods/resize.core", "spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [patch]}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := map[cluster.APICall]int{}
			for _, c := range tt.calls {
				calls[c] = 1
			}
			got := compareRole(stock, tt.ours, calls)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d is %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
