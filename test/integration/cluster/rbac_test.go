package cluster

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestCompareRole checks the comparison itself, without a cluster, so that an RBAC check
// cannot pass by comparing nothing.
func TestCompareRole(t *testing.T) {
	stock := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}}
	getPods := APICall{Resource: "pods", Verb: "get", Namespaced: true}
	listPods := APICall{Resource: "pods", Verb: "list", Namespaced: true}
	patchSts := APICall{APIGroup: "apps", Resource: "statefulsets", Verb: "patch", Namespaced: true}
	resize := APICall{Resource: "pods", Subresource: "resize", Verb: "patch", Namespaced: true}
	tests := []struct {
		name  string
		base  []rbacv1.PolicyRule
		ours  []rbacv1.PolicyRule
		calls []APICall
		want  []string // substrings, one per problem
	}{
		{"exact", stock, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"patch"}},
		}, []APICall{getPods, listPods, patchSts}, nil},
		{"missing", stock, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}, []APICall{getPods, patchSts}, []string{"missing rule: patch statefulsets.apps (namespaced) was called 1 times, and neither the stock role nor ours grants it"}},
		{"spare", stock, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete"}},
		}, []APICall{getPods}, []string{"spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [delete]}"}},
		{"granted by stock is spare in ours", stock, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		}, []APICall{listPods}, []string{"spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [list]}"}},
		{"subresource is its own resource", stock, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		}, []APICall{resize}, []string{"missing rule: patch pods/resize.core", "spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [patch]}"}},
		{"no base: every call needs ours", nil, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "watch"}},
		}, []APICall{getPods, listPods}, []string{
			"missing rule: list pods.core (namespaced) was called 1 times, and ours does not grant it; add {apiGroups: [\"\"], resources: [pods], verbs: [list]}",
			"spare rule: {apiGroups: [\"\"], resources: [pods], verbs: [watch]} is granted, but no call used it",
		}},
		{"wildcard verb serves any call", nil, []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"*"}},
		}, []APICall{patchSts}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := map[APICall]int{}
			for _, c := range tt.calls {
				calls[c] = 1
			}
			got := CompareRole(tt.base, "the stock role", tt.ours, calls)
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

// TestCheckNeeds checks the table check itself, without a cluster: each way a table can fall
// short of the role or of the calls is a problem.
func TestCheckNeeds(t *testing.T) {
	getPods := APICall{Resource: "pods", Verb: "get", Namespaced: true}
	patchPods := APICall{Resource: "pods", Verb: "patch", Namespaced: true}
	patchStatus := APICall{Resource: "pods", Subresource: "status", Verb: "patch", Namespaced: true}
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}}}
	ran := map[string]map[APICall]int{"status": {getPods: 2}, "run": {getPods: 1, patchPods: 3}}
	tests := []struct {
		name  string
		needs []Need
		want  []string // substrings, one per problem, in order
	}{
		{"every grant needed by an operation that made its call", []Need{{getPods, []string{"status"}}, {patchPods, []string{"run"}}}, nil},
		{"one of several operations made the call", []Need{{getPods, []string{"status"}}, {patchPods, []string{"status", "run"}}}, nil},
		{"a grant without an entry", []Need{{getPods, []string{"status"}}}, []string{
			`rule without a need: {apiGroups: [""], resources: [pods], verbs: [patch]}`,
		}},
		{"an entry whose operation never made the call", []Need{{getPods, []string{"status"}}, {patchPods, []string{"status"}}}, []string{
			`need of status: none called patch pods.core (namespaced)`,
		}},
		{"an entry whose operation never ran", []Need{{getPods, []string{"status"}}, {patchPods, []string{"run", "rollback"}}}, []string{
			`need of run, rollback: no operation "rollback" ran`,
		}},
		{"an entry naming no operation", []Need{{getPods, []string{"status"}}, {patchPods, nil}}, []string{
			`need of patch pods.core (namespaced): names no operation`,
		}},
		{"an entry no rule grants", []Need{{getPods, []string{"status"}}, {patchPods, []string{"run"}}, {patchStatus, []string{"run"}}}, []string{
			`need of run: no rule grants patch pods/status.core (namespaced)`,
			`need of run: none called patch pods/status.core (namespaced)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckNeeds(rules, tt.needs, ran)
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

// TestCallsByTest checks that a test's namespaces, with Namespace's random suffix, merge under
// the test's name, and that other namespaces and cluster-wide calls keep theirs.
func TestCallsByTest(t *testing.T) {
	get := APICall{Resource: "pods", Verb: "get", Namespaced: true}
	list := APICall{Resource: "pods", Verb: "list"}
	got := CallsByTest(map[string]map[APICall]int{
		"testkinds-daemonset-x7k2p":  {get: 1},
		"testkinds-daemonset-b4wq9":  {get: 2},
		"testkinds-deployment-zz9q2": {get: 1},
		"inplace-rollout-system":     {get: 3},
		"":                           {list: 1},
	})
	want := map[string]map[APICall]int{
		"testkinds-daemonset":    {get: 3},
		"testkinds-deployment":   {get: 1},
		"inplace-rollout-system": {get: 3},
		"cluster-wide":           {list: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CallsByTest: %v, want %v", got, want)
	}
}
