package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
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
func resourceOf(c APICall) string {
	if c.Subresource != "" {
		return c.Resource + "/" + c.Subresource
	}
	return c.Resource
}

// matches reports whether rule grants call, wildcards included.
func matches(rule rbacv1.PolicyRule, call APICall) bool {
	in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	res := resourceOf(call)
	resOK := in(rule.Resources, res) ||
		(call.Subresource != "" && (slices.Contains(rule.Resources, "*/"+call.Subresource) || slices.Contains(rule.Resources, call.Resource+"/*")))
	return len(rule.ResourceNames) == 0 && in(rule.APIGroups, call.APIGroup) && resOK && in(rule.Verbs, call.Verb)
}

// Allowed reports whether one of rules grants call.
func Allowed(rules []rbacv1.PolicyRule, call APICall) bool {
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

// CompareRole checks that ours grants exactly the calls that base does not: each such call
// must be granted (else a rule is missing), and each grant of ours must serve one of them (else
// it is spare). baseName names base in the problems ("Argo's stock ClusterRole"); base may be
// empty, when ours is the user's only role. Every problem is named, sorted.
func CompareRole(base []rbacv1.PolicyRule, baseName string, ours []rbacv1.PolicyRule, calls map[APICall]int) []string {
	var needed []APICall
	for c := range calls {
		if !Allowed(base, c) {
			needed = append(needed, c)
		}
	}
	grantedBy := "ours does not grant it"
	beyond := "no call"
	if len(base) > 0 {
		grantedBy = "neither " + baseName + " nor ours grants it"
		beyond = "no call beyond " + baseName
	}
	var problems []string
	for _, c := range needed {
		if !Allowed(ours, c) {
			problems = append(problems, fmt.Sprintf("missing rule: %s was called %d times, and %s; add %s",
				c, calls[c], grantedBy, grant{c.APIGroup, resourceOf(c), c.Verb}))
		}
	}
	for _, g := range grants(ours) {
		used := slices.ContainsFunc(needed, func(c APICall) bool {
			return matches(rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}}, c)
		})
		if !used {
			problems = append(problems, fmt.Sprintf("spare rule: %s is granted, but %s used it; remove it", g, beyond))
		}
	}
	sort.Strings(problems)
	return problems
}

// Need names the operations of a test that need one grant of a role: each of Ops (names the
// test gives the commands or steps it runs) makes Call, which without the grant is forbidden,
// so removing the rule that grants it breaks them. Some calls happen only on a condition the
// test provokes without choosing where (a pod read again after a write conflict): such an entry
// names every operation that may make the call, and one of them must have.
type Need struct {
	Call APICall
	Ops  []string
}

// NeedIn is the Need of the namespaced call verb on group's resource (and subresource, if any)
// that ops make.
func NeedIn(verb, group, resource, subresource string, ops ...string) Need {
	return Need{Call: APICall{APIGroup: group, Resource: resource, Subresource: subresource, Verb: verb, Namespaced: true}, Ops: ops}
}

// NeedClusterWide is the Need of the cluster-wide call verb on group's resource that a
// controller's informer makes, named as CallsByTest names it: "cluster-wide".
func NeedClusterWide(verb, group, resource string) Need {
	return Need{Call: APICall{APIGroup: group, Resource: resource, Verb: verb}, Ops: []string{"cluster-wide"}}
}

// CheckNeeds checks a table of needs against a role and the calls each operation made (opCalls,
// by operation name, from the audit log): every grant of rules is named by an entry, every entry
// is granted by a rule, names operations that ran, and one of them made its call. So a rule
// without an entry, or an entry whose call never happened, is a problem: no rule is spare, and
// each says what breaks without it. Every problem is named, sorted.
func CheckNeeds(rules []rbacv1.PolicyRule, needs []Need, opCalls map[string]map[APICall]int) []string {
	var problems []string
	for _, g := range grants(rules) {
		one := rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}}
		if !slices.ContainsFunc(needs, func(n Need) bool { return matches(one, n.Call) }) {
			problems = append(problems, fmt.Sprintf("rule without a need: %s names no operation that breaks without it; add one to the table", g))
		}
	}
	for _, n := range needs {
		ops := strings.Join(n.Ops, ", ")
		if !Allowed(rules, n.Call) {
			problems = append(problems, fmt.Sprintf("need of %s: no rule grants %s", ops, n.Call))
		}
		made := false
		for _, op := range n.Ops {
			calls, ran := opCalls[op]
			if !ran {
				problems = append(problems, fmt.Sprintf("need of %s: no operation %q ran", ops, op))
			}
			made = made || calls[n.Call] > 0
		}
		if len(n.Ops) == 0 {
			problems = append(problems, fmt.Sprintf("need of %s: names no operation", n.Call))
		} else if !made {
			problems = append(problems, fmt.Sprintf("need of %s: none called %s; name an operation that does", ops, n.Call))
		}
	}
	sort.Strings(problems)
	return problems
}

// FormatOpCalls lists the calls of each operation, sorted, one per line under its operation, for
// a problem's report.
func FormatOpCalls(opCalls map[string]map[APICall]int) string {
	var b strings.Builder
	for _, op := range slices.Sorted(maps.Keys(opCalls)) {
		var made []string
		for call, n := range opCalls[op] {
			made = append(made, fmt.Sprintf("%s x%d", call, n))
		}
		sort.Strings(made)
		fmt.Fprintf(&b, "  %s:\n    %s\n", op, strings.Join(made, "\n    "))
	}
	return b.String()
}

// FormatNeeds lists a table of needs, one grant a line with the operations that need it.
func FormatNeeds(needs []Need) string {
	var b strings.Builder
	for _, n := range needs {
		fmt.Fprintf(&b, "  %s: %s\n", n.Call, strings.Join(n.Ops, " | "))
	}
	return b.String()
}

// ReadRole reads a namespaced Role manifest.
func ReadRole(path string) (*rbacv1.Role, error) {
	var role rbacv1.Role
	if err := readYAML(path, &role); err != nil {
		return nil, err
	}
	if role.Kind != "Role" || role.Name == "" {
		return nil, fmt.Errorf("%s: want a named Role, have kind %q name %q", path, role.Kind, role.Name)
	}
	return &role, nil
}

// ServiceAccountKubeconfig writes dir/kubeconfig, authenticating as the ServiceAccount
// namespace/name with a token from a TokenRequest (its context's namespace is namespace), and
// returns its path.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name, dir string) (string, error) {
	return c.writeServiceAccountKubeconfig(ctx, namespace, name, dir)
}
