package controller_test

import (
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

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
		policySts = "testpolicyrollsoutwhatgitapplies-statefulset"
		policyDs  = "testpolicyrollsoutwhatgitapplies-daemonset"
		resized   = "testpolicyresizeswhatgitapplies"
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
		need("list", "apps", "controllerrevisions", "", daemonSet, policySts, policyDs),
		// Workloads under a policy, and the policies, are watched (informers); a policy's
		// status is written per workload.
		clusterWide("watch", "apps", "statefulsets"),
		clusterWide("watch", "apps", "daemonsets"),
		clusterWide("list", "inplace-rollout.io", "inplacerolloutpolicies"),
		clusterWide("watch", "inplace-rollout.io", "inplacerolloutpolicies"),
		need("update", "inplace-rollout.io", "inplacerolloutpolicies", "status", policySts, policyDs),
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
		need("patch", "", "pods", "resize", resized),
		need("get", "", "configmaps", "", gatedPods),
		need("list", "", "configmaps", "", gatedPods),
		need("create", "", "configmaps", "", gatedPods),
		need("update", "", "configmaps", "", gatedPods),
		need("delete", "", "configmaps", "", gatedPods),
		// The scan for the rollouts of deleted objects lists the workloads of every namespace
		// (the controller watches them all) for their locks, whatever tests run; a refused list
		// finds no lock at all, so TestOrphanedRolloutRollsBack breaks without any one of these.
		clusterWide("list", "apps", "statefulsets"),
		clusterWide("list", "apps", "daemonsets"),
		clusterWide("list", "apps", "deployments"),
		clusterWide("list", "", "configmaps"),
		// The webhook's Secret, read as the controller starts.
		need("get", "", "secrets", "", system),
		need("get", "coordination.k8s.io", "leases", "", system),
		need("create", "coordination.k8s.io", "leases", "", system),
		need("update", "coordination.k8s.io", "leases", "", system),
	}
}
