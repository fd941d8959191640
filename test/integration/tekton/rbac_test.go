package tekton_test

import (
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// needs names, for each grant of config/tekton's roles, the tests (as cluster.CallsByTest names
// them: by their namespaces) whose runs make the call the grant allows, and so break without
// it; "cluster-wide" is the controller's informer, and inplace-rollout-system its Lease.
func needs() []cluster.Need {
	need := cluster.NeedIn
	clusterWide := cluster.NeedClusterWide
	const (
		statefulSet = "testpipelinerunrollsstatefulsetinplace"
		daemonSet   = "testcustomrunrollseachkind-daemonset"
		deployment  = "testcustomrunrollseachkind-deployment-with-prepull"
		// Namespace cuts a test's name at 50 characters.
		gatedPods = "testcustomrunrollseachkind-gated-pods--then-a-seco"
		resized   = "testcustomrunresizesinplace"
	)
	return []cluster.Need{
		clusterWide("list", "tekton.dev", "customruns"),
		clusterWide("watch", "tekton.dev", "customruns"),
		need("update", "tekton.dev", "customruns", "", "testcustomrunofourkind"),
		need("update", "tekton.dev", "customruns", "status", "testcustomrunofourkind"),
		need("get", "inplace-rollout.io", "inplacerollouts", "", "testexamplesapply-statefulset-custom-task-ref"),
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
		need("patch", "", "pods", "resize", resized),
		need("get", "", "configmaps", "", gatedPods),
		need("list", "", "configmaps", "", gatedPods),
		need("create", "", "configmaps", "", gatedPods),
		need("update", "", "configmaps", "", gatedPods),
		need("delete", "", "configmaps", "", gatedPods),
		// The scan for the rollouts of deleted runs lists the workloads of every namespace (the
		// controller watches them all) for their locks, whatever tests run; a refused list finds
		// no lock at all, so TestOrphanedRolloutRollsBack breaks without any one of these.
		clusterWide("list", "apps", "statefulsets"),
		clusterWide("list", "apps", "daemonsets"),
		clusterWide("list", "apps", "deployments"),
		clusterWide("list", "", "configmaps"),
		// The analysis' Prometheus password, from a Secret.
		need("get", "", "secrets", "", "testanalysisgateseverybatch-good-image"),
		need("get", "coordination.k8s.io", "leases", "", "inplace-rollout-system"),
		need("create", "coordination.k8s.io", "leases", "", "inplace-rollout-system"),
		need("update", "coordination.k8s.io", "leases", "", "inplace-rollout-system"),
	}
}
