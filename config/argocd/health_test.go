package argocd

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// sample is an InPlaceRollout of metadata.generation 2 whose status the controller wrote at
// observed with phase and reason, and with the conditions, by type, that are True (every other
// condition False): the status each phase has.
func sample(observed int64, phase, reason string, trueConditions ...string) *unstructured.Unstructured {
	conds := []any{}
	for _, c := range []string{"Progressing", "Succeeded", "RolledBack", "Paused", "Ready", "Reconciling", "Stalled"} {
		st := "False"
		for _, t := range trueConditions {
			if t == c {
				st = "True"
			}
		}
		conds = append(conds, map[string]any{"type": c, "status": st, "reason": reasonOr(reason, phase), "message": "m", "observedGeneration": observed,
			"lastTransitionTime": "2026-12-06T12:00:00Z"})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inplace-rollout.io/v1alpha1", "kind": "InPlaceRollout",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "generation": int64(2)},
		"spec":     map[string]any{"target": map[string]any{"kind": "StatefulSet", "name": "web"}},
		"status": map[string]any{"observedGeneration": observed, "phase": phase, "reason": reason, "message": "batch 2/4, 30/100 pods updated",
			"rolloutID": "r-1", "batch": int64(2), "batches": int64(4), "updated": int64(30), "total": int64(100), "conditions": conds},
	}}
}

func reasonOr(reason, phase string) string {
	if reason != "" {
		return reason
	}
	return phase
}

// TestHealth: Argo CD's Lua health check and Flux's kstatus judge an InPlaceRollout in each phase.
func TestHealth(t *testing.T) {
	script, err := os.ReadFile("health.lua")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		obj     *unstructured.Unstructured
		argo    string
		kstatus status.Status
	}{
		{"a new spec not yet observed", sample(1, "Succeeded", "", "Succeeded", "Ready"), "Progressing", status.InProgressStatus},
		{"progressing", sample(2, "Progressing", "", "Progressing", "Reconciling"), "Progressing", status.InProgressStatus},
		{"analysing a batch", sample(2, "Analyzing", "", "Progressing", "Reconciling"), "Progressing", status.InProgressStatus},
		{"paused on an inconclusive analysis", sample(2, "Paused", "AnalysisInconclusive", "Paused", "Reconciling"), "Suspended", status.InProgressStatus},
		{"holding at its hold point", sample(2, "Holding", "", "Ready"), "Suspended", status.CurrentStatus},
		{"succeeded", sample(2, "Succeeded", "", "Succeeded", "Ready"), "Healthy", status.CurrentStatus},
		{"rolling back", sample(2, "RollingBack", "PodFailed", "Progressing", "Reconciling"), "Progressing", status.InProgressStatus},
		{"rolled back", sample(2, "RolledBack", "AnalysisFailed", "RolledBack", "Stalled"), "Degraded", status.FailedStatus},
		{"needs a person", sample(2, "Failed", "TemplateChanged", "Stalled"), "Degraded", status.FailedStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			health, message := luaHealth(t, string(script), tt.obj.Object)
			if health != tt.argo || message == "" {
				t.Errorf("Argo CD health %q (%q), want %q with a message", health, message, tt.argo)
			}
			res, err := status.Compute(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.kstatus {
				t.Errorf("kstatus %s (%s), want %s", res.Status, res.Message, tt.kstatus)
			}
		})
	}
}

// TestHealthWithoutStatus: an object the controller has not written a status on is Progressing.
func TestHealthWithoutStatus(t *testing.T) {
	script, err := os.ReadFile("health.lua")
	if err != nil {
		t.Fatal(err)
	}
	obj := sample(1, "", "")
	delete(obj.Object, "status")
	if health, _ := luaHealth(t, string(script), obj.Object); health != "Progressing" {
		t.Errorf("Argo CD health %q, want Progressing", health)
	}
}

// luaHealth runs script on obj as Argo CD does.
func luaHealth(t *testing.T, script string, obj map[string]any) (health, message string) {
	t.Helper()
	health, message, err := run(script, obj)
	if err != nil {
		t.Fatal(err)
	}
	return health, message
}

// workloadSample is a StatefulSet (or DaemonSet) web of 3 pods at generation 2, observed, its
// template on app:v2, updated of its pods at the template's revision, with the annotations.
func workloadSample(kind string, updated int64, annotations map[string]any) map[string]any {
	status := map[string]any{"observedGeneration": int64(2), "replicas": int64(3), "readyReplicas": int64(3), "updatedReplicas": updated,
		"currentRevision": "web-1", "updateRevision": "web-2"}
	spec := map[string]any{"replicas": int64(3), "updateStrategy": map[string]any{"type": "OnDelete"},
		"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "reg/app:v2"}}}}}
	if kind == "DaemonSet" {
		status = map[string]any{"observedGeneration": int64(2), "desiredNumberScheduled": int64(3), "numberAvailable": int64(3), "updatedNumberScheduled": updated}
		delete(spec, "replicas")
	}
	return map[string]any{"apiVersion": "apps/v1", "kind": kind,
		"metadata": map[string]any{"name": "web", "namespace": "shop", "generation": int64(2), "annotations": annotations},
		"spec":     spec, "status": status}
}

// lockOf is the lock annotation of a rollout under a policy to images, in phase.
func lockOf(phase, images string) map[string]any {
	return map[string]any{
		"inplace-rollout.io/policy":  "canary",
		"inplace-rollout.io/rollout": `{"holder":"policy:shop/canary","holderUID":"u1","rolloutID":"r-2","specHash":"h","images":` + images + `,"previousImages":` + images + `,"templateOwned":true,"phase":"` + phase + `","reason":"pod web-2 crash-loops","reasonCode":"PodFailed","startedAt":"2026-12-07T10:00:00Z"}`,
	}
}

// TestWorkloadHealth: Argo CD's Lua health check judges a StatefulSet or DaemonSet under a policy
// by its pods' revisions and its rollout, and any other as Argo CD's own check does.
func TestWorkloadHealth(t *testing.T) {
	onTemplate := `{"app":"reg/app:v2"}`
	tests := []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"OnDelete, no policy, pods behind: Argo CD's own verdict", workloadSample("StatefulSet", 0, nil), "Healthy"},
		{"under a policy, pods behind", workloadSample("StatefulSet", 1, map[string]any{"inplace-rollout.io/policy": "canary"}), "Progressing"},
		{"under a policy, rolling out", workloadSample("StatefulSet", 1, lockOf("Progressing", onTemplate)), "Progressing"},
		{"under a policy, paused", workloadSample("StatefulSet", 1, lockOf("Paused", onTemplate)), "Suspended"},
		{"under a policy, the template's rollout rolled back", workloadSample("StatefulSet", 0, lockOf("RolledBack", onTemplate)), "Degraded"},
		{"under a policy, an older template's rollout rolled back, the new one not started", workloadSample("StatefulSet", 0, lockOf("RolledBack", `{"app":"reg/app:v1"}`)), "Progressing"},
		{"under a policy, every pod at the revision", workloadSample("StatefulSet", 3, lockOf("Succeeded", onTemplate)), "Healthy"},
		{"DaemonSet under a policy, pods behind", workloadSample("DaemonSet", 2, map[string]any{"inplace-rollout.io/policy": "canary"}), "Progressing"},
		{"DaemonSet under a policy, rolled back", workloadSample("DaemonSet", 0, lockOf("RolledBack", onTemplate)), "Degraded"},
		{"DaemonSet under a policy, every pod updated", workloadSample("DaemonSet", 3, lockOf("Succeeded", onTemplate)), "Healthy"},
		{"DaemonSet, OnDelete, no policy", workloadSample("DaemonSet", 0, nil), "Healthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			health, message, err := WorkloadHealth(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if health != tt.want || message == "" {
				t.Errorf("Argo CD health %q (%q), want %q with a message", health, message, tt.want)
			}
		})
	}
}
