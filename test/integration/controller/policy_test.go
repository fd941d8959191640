package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/inplace-rollout/inplace-rollout/controller/policy"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// manifest is the whole manifest of workload web of kind in ns as Git holds it, the way a GitOps
// tool applies it: OnDelete, under policy canary, its app container on image and its template
// labelled with version.
func manifest(kind, ns, image, version string) string {
	replicas := "  replicas: 3\n  serviceName: web\n  podManagementPolicy: Parallel\n"
	if kind == "DaemonSet" {
		replicas = ""
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: %s
metadata:
  name: web
  namespace: %s
  annotations:
    %s: canary
spec:
%s  selector:
    matchLabels: {app: web}
  updateStrategy: {type: OnDelete}
  template:
    metadata:
      labels: {app: web, app.kubernetes.io/version: %q}
      annotations: {checksum/config: %q}
    spec:
      containers:
      - {name: app, image: %q}
      - {name: sidecar, image: registry.example/sidecar:v1}
`, kind, ns, v1alpha1.PolicyAnnotation, replicas, version, "sum-"+version, image)
}

// gated is a policy's spec in YAML flow: batches of 1 pod and the rest, each judged by the
// analysis of the suite's Prometheus.
func gated() string {
	return fmt.Sprintf(`{batches: [1, "100%%"], soak: 2s, timeout: 2m, analysis: {prometheus: {address: %q}, interval: 1s, count: 2, window: 5s}}`, env.PrometheusURL)
}

// applyPolicy applies policy canary in ns with the spec given as YAML flow.
func applyPolicy(t *testing.T, ns, spec string) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: canary\n  namespace: %s\nspec: %s\n", v1alpha1.APIVersion, v1alpha1.PolicyKind, ns, spec)
	mustKubectl(t, doc, "apply", "-f", "-")
}

// workloadSpec is workload web's spec and generation as stored, JSON.
func workloadSpec(t *testing.T, kind, ns string) (string, int64) {
	t.Helper()
	var obj runtime.Object
	var err error
	switch kind {
	case "StatefulSet":
		obj, err = env.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "web", metav1.GetOptions{})
	default:
		obj, err = env.Client.AppsV1().DaemonSets(ns).Get(t.Context(), "web", metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     json.RawMessage   `json:"spec"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return string(m.Spec), m.Metadata.Generation
}

// policyEntry waits until policy canary's status of workload web of kind satisfies cond, and
// returns it.
func policyEntry(t *testing.T, ns, kind, what string, cond func(v1alpha1.PolicyWorkloadStatus) bool) v1alpha1.PolicyWorkloadStatus {
	t.Helper()
	var got v1alpha1.PolicyWorkloadStatus
	cluster.WaitFor(t, rolloutTimeout, fmt.Sprintf("policy %s/canary: %s %s", ns, kind, what), func(ctx context.Context) (bool, error) {
		u, err := dynamicClient(t).Resource(policy.Resource).Namespace(ns).Get(ctx, "canary", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var p v1alpha1.InPlaceRolloutPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			return false, err
		}
		i := slices.IndexFunc(p.Status.Workloads, func(e v1alpha1.PolicyWorkloadStatus) bool { return e.Kind == kind && e.Name == "web" })
		if i < 0 {
			return false, fmt.Errorf("no entry of %s web in %+v", kind, p.Status)
		}
		got = p.Status.Workloads[i]
		if !cond(got) {
			return false, fmt.Errorf("entry %+v", got)
		}
		return true, nil
	})
	return got
}

// podsOf are the pods of web, by name.
func podsOf(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	return clitest.ListPods(t, env, ns, "app=web")
}

// TestPolicyRollsOutWhatGitApplies: a StatefulSet and a DaemonSet whose manifests say OnDelete and
// name a policy, their image and version label changed by an apply of the whole manifest (as a
// GitOps tool does), get their pods updated in place in the policy's batches, each passing its
// analysis: the new image,
// version label and config checksum on every pod, same UIDs, the workload's spec and generation
// what was applied (no drift), and its own status counting the pods updated. A crash image rolls
// the pods back, the revision is remembered as failed and not retried; a new apply with a good
// image rolls out.
func TestPolicyRollsOutWhatGitApplies(t *testing.T) {
	for _, kind := range []string{"StatefulSet", "DaemonSet"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			applyPolicy(t, ns, gated())
			mustKubectl(t, manifest(kind, ns, clitest.AppV1, "1.0"), "apply", "-f", "-")
			cluster.WaitFor(t, rolloutTimeout, "the pods of "+kind+" web Ready", func(context.Context) (bool, error) {
				pods := podsOf(t, ns)
				// Three replicas, or one pod on each of the three simulated nodes.
				return len(pods) == 3 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !inplace.PodReady(&p) }), nil
			})
			before := recordPods(t, ns, "web")
			time.Sleep(6 * time.Second) // Prometheus sees the pods serve for a full rate window

			mustKubectl(t, manifest(kind, ns, clitest.AppV2, "2.0"), "apply", "-f", "-")
			applied, generation := workloadSpec(t, kind, ns)
			entry := policyEntry(t, ns, kind, "Succeeded", func(e v1alpha1.PolicyWorkloadStatus) bool { return e.Phase == "Succeeded" && e.Batches == 2 })
			for _, p := range podsOf(t, ns) {
				if p.Labels["app.kubernetes.io/version"] != "2.0" || p.Annotations["checksum/config"] != "sum-2.0" || p.Spec.Containers[0].Image != clitest.AppV2 {
					t.Errorf("pod %s: image %s, labels %v, annotations %v; want %s, version 2.0, checksum sum-2.0", p.Name, p.Spec.Containers[0].Image, p.Labels, p.Annotations, clitest.AppV2)
				}
			}
			if a := entry.Analysis; a == nil || a.Batch != 2 || a.Verdict != "Pass" {
				t.Errorf("the policy's entry of %s web after the rollout shows the verdict %+v, want batch 2's Pass", kind, a)
			}
			checkSamePods(t, ns, "web", before, false)
			if spec, gen := workloadSpec(t, kind, ns); spec != applied || gen != generation {
				t.Errorf("%s web's spec or generation changed after the apply (generation %d, was %d):\n%s\nwant\n%s", kind, gen, generation, spec, applied)
			}
			checkCounted(t, kind, ns)
			if lock := mustKubectl(t, "", "get", strings.ToLower(kind)+"/web", "-n", ns, "-o", "jsonpath={.metadata.annotations.inplace-rollout\\.io/rollout}"); strings.Contains(lock, `"superseded"`) || entry.Reason != "" {
				t.Errorf("the rollout to v2 was superseded on its way (lock %s, entry %+v): one rollout per revision", lock, entry)
			}
			onV2 := recordPods(t, ns, "web")

			// A crash image: rolled back, remembered, not retried.
			mustKubectl(t, manifest(kind, ns, "registry.example/app:crash", "3.0"), "apply", "-f", "-")
			failed := policyEntry(t, ns, kind, "RolledBack", func(e v1alpha1.PolicyWorkloadStatus) bool { return e.Phase == "RolledBack" && e.FailedRevision != "" })
			if failed.Revision == entry.Revision || failed.FailedRevision != failed.Revision {
				t.Errorf("entry %+v after the crash image; want the new revision recorded as failed", failed)
			}
			for _, p := range podsOf(t, ns) {
				if p.Labels["app.kubernetes.io/version"] != "2.0" || p.Annotations["checksum/config"] != "sum-2.0" {
					t.Errorf("pod %s after the rollback: labels %v, annotations %v; want version 2.0 and checksum sum-2.0 back", p.Name, p.Labels, p.Annotations)
				}
			}
			// Back on the image each ran, by digest (the revert may spell it so).
			checkSamePods(t, ns, "web", onV2, true)
			if out := mustKubectl(t, "", "get", strings.ToLower(kind)+"/web", "-n", ns, "-o", "jsonpath={.metadata.annotations.inplace-rollout\\.io/rollout}"); !strings.Contains(out, `"phase":"RolledBack"`) {
				t.Errorf("lock after the rollback: %s", out)
			}
			checkSamePods(t, ns, "web", before, false)

			// A good image again: rolled out.
			mustKubectl(t, manifest(kind, ns, clitest.AppV3, "4.0"), "apply", "-f", "-")
			policyEntry(t, ns, kind, "the new revision Succeeded", func(e v1alpha1.PolicyWorkloadStatus) bool {
				return e.Phase == "Succeeded" && e.Revision != failed.Revision
			})
			for _, p := range podsOf(t, ns) {
				if p.Spec.Containers[0].Image != clitest.AppV3 {
					t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, clitest.AppV3)
				}
			}
			checkSamePods(t, ns, "web", before, false)
		})
	}
}

// TestPolicyNotInPlace: a revision that changes the env is said not to be in place, naming the
// field, in the policy's status and in a Warning Event on the workload, and nothing is changed.
// Once the workload names the policy no longer, its entry leaves the policy's status.
func TestPolicyNotInPlace(t *testing.T) {
	ns := env.Namespace(t)
	applyPolicy(t, ns, `{batches: ["100%"]}`)
	mustKubectl(t, manifest("StatefulSet", ns, clitest.AppV1, "1.0"), "apply", "-f", "-")
	clitest.WaitStatefulSet(t, env, ns, "web", "3 pods Ready", func(s *appsv1.StatefulSet) bool { return s.Status.ReadyReplicas == 3 })
	before := recordPods(t, ns, "web")
	withEnv := strings.Replace(manifest("StatefulSet", ns, clitest.AppV2, "2.0"), "      - {name: app, image:", "      - {name: app, env: [{name: MODE, value: fast}], image:", 1)
	mustKubectl(t, withEnv, "apply", "-f", "-")
	entry := policyEntry(t, ns, "StatefulSet", policy.PhaseNotInPlace, func(e v1alpha1.PolicyWorkloadStatus) bool { return e.Phase == policy.PhaseNotInPlace })
	if !strings.Contains(entry.Message, "template.spec.containers[0].env") || !strings.Contains(entry.Message, "RollingUpdate") {
		t.Errorf("message %q; want it to name template.spec.containers[0].env and how to recreate instead", entry.Message)
	}
	cluster.WaitFor(t, rolloutTimeout, "kubectl describe statefulset web listing the "+policy.EventNotApplied+" Event", func(context.Context) (bool, error) {
		describe := mustKubectl(t, "", "describe", "statefulset", "web", "-n", ns)
		if !strings.Contains(describe, policy.EventNotApplied) || !strings.Contains(describe, "template.spec.containers[0].env") {
			return false, fmt.Errorf("describe:\n%s", describe)
		}
		return true, nil
	})
	checkSamePods(t, ns, "web", before, true)

	mustKubectl(t, "", "annotate", "statefulset", "web", "-n", ns, v1alpha1.PolicyAnnotation+"-")
	cluster.WaitFor(t, rolloutTimeout, "policy "+ns+"/canary without an entry of web", func(ctx context.Context) (bool, error) {
		u, err := dynamicClient(t).Resource(policy.Resource).Namespace(ns).Get(ctx, "canary", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		entries, _, err := unstructured.NestedSlice(u.Object, "status", "workloads")
		if err != nil || len(entries) > 0 {
			return false, fmt.Errorf("status.workloads %v (%v)", entries, err)
		}
		return true, nil
	})
}

// checkCounted waits until workload web's own status counts every pod updated: the workload
// controller judges the pods by the revision labels they were given. (With OnDelete, a
// StatefulSet's currentRevision moves only when a pod is recreated.)
func checkCounted(t *testing.T, kind, ns string) {
	t.Helper()
	cluster.WaitFor(t, rolloutTimeout, kind+" web counting every pod updated", func(ctx context.Context) (bool, error) {
		if kind == "StatefulSet" {
			s, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if s.Status.ObservedGeneration != s.Generation || s.Status.UpdatedReplicas != 3 {
				return false, fmt.Errorf("status %+v", s.Status)
			}
			return true, nil
		}
		d, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.DesiredNumberScheduled == 0 || d.Status.UpdatedNumberScheduled != d.Status.DesiredNumberScheduled {
			return false, fmt.Errorf("status %+v", d.Status)
		}
		return true, nil
	})
}

// TestPolicyResizesWhatGitApplies: an apply of a StatefulSet's manifest that changes only its
// app container's CPU rolls the new values out in place under the policy: every pod keeps its
// UID and its container, which the kubelet reports running with the new CPU, and the
// StatefulSet's spec stays what was applied.
func TestPolicyResizesWhatGitApplies(t *testing.T) {
	ns := env.Namespace(t)
	applyPolicy(t, ns, `{batches: [1, "100%"], timeout: 2m}`)
	withCPU := func(cpu string) string {
		return strings.Replace(manifest("StatefulSet", ns, clitest.AppV1, "1.0"), "      - {name: app, image: ",
			fmt.Sprintf("      - resources: {requests: {cpu: %s}, limits: {cpu: 400m}}\n        name: app\n        image: ", cpu), 1)
	}
	mustKubectl(t, withCPU("100m"), "apply", "-f", "-")
	cluster.WaitFor(t, rolloutTimeout, "the pods of StatefulSet web Ready", func(context.Context) (bool, error) {
		pods := podsOf(t, ns)
		return len(pods) == 3 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !inplace.PodReady(&p) }), nil
	})
	before := podsOf(t, ns)

	mustKubectl(t, withCPU("200m"), "apply", "-f", "-")
	applied, generation := workloadSpec(t, "StatefulSet", ns)
	policyEntry(t, ns, "StatefulSet", "Succeeded", func(e v1alpha1.PolicyWorkloadStatus) bool { return e.Phase == "Succeeded" })
	after := podsOf(t, ns)
	for i, p := range after {
		b := before[i]
		cs, bcs := cluster.ContainerStatus(&p, "app"), cluster.ContainerStatus(&b, "app")
		switch {
		case p.Name != b.Name || p.UID != b.UID:
			t.Errorf("pod %s was recreated", b.Name)
		case cs.ContainerID != bcs.ContainerID || cs.RestartCount != bcs.RestartCount:
			t.Errorf("pod %s: app restarted for a CPU resize (%s -> %s)", p.Name, bcs.ContainerID, cs.ContainerID)
		case cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "200m":
			t.Errorf("pod %s: the kubelet reports app runs with %v, want a cpu request of 200m", p.Name, cs.Resources)
		}
	}
	if spec, gen := workloadSpec(t, "StatefulSet", ns); spec != applied || gen != generation {
		t.Errorf("StatefulSet web's spec or generation changed after the apply (generation %d, was %d)", gen, generation)
	}
	checkCounted(t, "StatefulSet", ns)
}
