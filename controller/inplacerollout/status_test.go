package inplacerollout

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/config/argocd"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// TestStatusOfEachPhase: the status the controller writes for each of the engine's phases has
// the conditions `kubectl wait` reads, and Argo CD's health check and Flux's kstatus judge it as
// the health contract says.
func TestStatusOfEachPhase(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	pass := &analysis.Run{Batch: 1, Pods: 2, Verdict: analysis.Pass}
	tests := []struct {
		name    string
		st      rollout.Status
		reason  string
		conds   map[string]metav1.ConditionStatus // Progressing, Succeeded, RolledBack, Paused, Ready, Reconciling, Stalled
		argo    string
		kstatus kstatus.Status
	}{
		{"progressing", rollout.Status{Phase: rollout.PhaseProgressing, Batch: 2, Batches: 3, Updated: 3, Total: 6, Analysis: pass}, "",
			conds("True", "Unknown", "False", "False", "False", "True", "False"), "Progressing", kstatus.InProgressStatus},
		{"analysing", rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1, Batches: 3, Updated: 2, Total: 6, Analysis: &analysis.Run{Batch: 1, Pods: 2}}, "",
			conds("True", "Unknown", "False", "False", "False", "True", "False"), "Progressing", kstatus.InProgressStatus},
		{"paused", rollout.Status{Phase: rollout.PhasePaused, Reason: rollout.ReasonAnalysisInconclusive, Batch: 1, Batches: 3, Updated: 2, Total: 6,
			Analysis: &analysis.Run{Batch: 1, Pods: 2, Verdict: analysis.Inconclusive}}, string(rollout.ReasonAnalysisInconclusive),
			conds("False", "Unknown", "False", "True", "False", "True", "False"), "Suspended", kstatus.InProgressStatus},
		{"holding", rollout.Status{Phase: rollout.PhaseHolding, Batch: 1, Batches: 3, Updated: 2, Total: 6}, "",
			conds("False", "Unknown", "False", "False", "True", "False", "False"), "Suspended", kstatus.CurrentStatus},
		{"succeeded", rollout.Status{Phase: rollout.PhaseSucceeded, Batch: 3, Batches: 3, Updated: 6, Total: 6}, "",
			conds("False", "True", "False", "False", "True", "False", "False"), "Healthy", kstatus.CurrentStatus},
		{"rolling back", rollout.Status{Phase: rollout.PhaseRollingBack, Reason: rollout.ReasonPodFailed, Total: 6, RolledBack: 1}, string(rollout.ReasonPodFailed),
			conds("True", "Unknown", "False", "False", "False", "True", "False"), "Progressing", kstatus.InProgressStatus},
		{"rolled back", rollout.Status{Phase: rollout.PhaseRolledBack, Reason: rollout.ReasonAnalysisFailed, Total: 6, RolledBack: 2}, string(rollout.ReasonAnalysisFailed),
			conds("False", "False", "True", "False", "False", "False", "True"), "Degraded", kstatus.FailedStatus},
		{"needs a person", rollout.Status{Phase: rollout.PhaseFailed, Reason: rollout.ReasonTemplateChanged, Total: 6, Updated: 2}, string(rollout.ReasonTemplateChanged),
			conds("False", "False", "False", "False", "False", "False", "True"), "Degraded", kstatus.FailedStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(1, "Progressing")
			obj.Status.Conditions = nil
			setStatus(obj, tt.st, tt.reason, "the message", now)
			if obj.Status.ObservedGeneration != obj.Generation || obj.Status.Phase != string(tt.st.Phase) || obj.Status.Reason != tt.reason ||
				obj.Status.Updated != int32(tt.st.Updated) || obj.Status.Total != int32(tt.st.Total) {
				t.Errorf("status %+v, want generation %d and the engine's phase and counts %+v", obj.Status, obj.Generation, tt.st)
			}
			for typ, want := range tt.conds {
				c := meta.FindStatusCondition(obj.Status.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != obj.Generation || c.Reason == "" || c.Message != "the message" {
					t.Errorf("condition %s = %+v, want status %s at generation %d with a reason and the message", typ, c, want, obj.Generation)
				}
			}
			if len(obj.Status.Conditions) != len(tt.conds) {
				t.Errorf("%d conditions, want %d", len(obj.Status.Conditions), len(tt.conds))
			}
			u := toUnstructured(t, obj)
			if health, msg, err := argocd.Health(u.Object); err != nil || health != tt.argo {
				t.Errorf("Argo CD health %q (%q, %v), want %q", health, msg, err, tt.argo)
			}
			res, err := kstatus.Compute(u)
			if err != nil || res.Status != tt.kstatus {
				t.Errorf("kstatus %v (%v), want %s", res, err, tt.kstatus)
			}
		})
	}
}

func conds(progressing, succeeded, rolledBack, paused, ready, reconciling, stalled metav1.ConditionStatus) map[string]metav1.ConditionStatus {
	return map[string]metav1.ConditionStatus{CondProgressing: progressing, CondSucceeded: succeeded, CondRolledBack: rolledBack,
		CondPaused: paused, CondReady: ready, CondReconciling: reconciling, CondStalled: stalled}
}

func toUnstructured(t *testing.T, obj *v1alpha1.InPlaceRollout) *unstructured.Unstructured {
	t.Helper()
	obj.APIVersion, obj.Kind = v1alpha1.APIVersion, v1alpha1.Kind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestStatusKeepsTheVerdictOfItsRollout: an ended rollout's status, read from its lock, carries
// no analysis; the last verdict of the same rollout stays, another rollout's does not.
func TestStatusKeepsTheVerdictOfItsRollout(t *testing.T) {
	now := metav1.Now()
	obj := object(2, "Analyzing")
	obj.Status.RolloutID = "r-1"
	obj.Status.Analysis = &v1alpha1.AnalysisVerdict{Batch: 2, Pods: 4, Verdict: "Pass"}
	setStatus(obj, rollout.Status{RolloutID: "r-1", Phase: rollout.PhaseSucceeded}, "", "done", now)
	if a := obj.Status.Analysis; a == nil || a.Verdict != "Pass" || a.Batch != 2 {
		t.Errorf("analysis %+v, want batch 2's Pass kept", a)
	}
	setStatus(obj, rollout.Status{RolloutID: "r-2", Phase: rollout.PhaseProgressing}, "", "new", now)
	if obj.Status.Analysis != nil {
		t.Errorf("analysis %+v of rollout r-1 kept on rollout r-2's status", obj.Status.Analysis)
	}
}

// TestConditionTimesChangeOnlyOnTransitions: a condition's lastTransitionTime moves only when
// its status changes, so `kubectl describe` tells when each happened.
func TestConditionTimesChangeOnlyOnTransitions(t *testing.T) {
	t1, t2 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	obj := object(2, "")
	setStatus(obj, rollout.Status{Phase: rollout.PhaseProgressing, Batch: 1}, "", "one", t1)
	setStatus(obj, rollout.Status{Phase: rollout.PhaseAnalyzing, Batch: 1}, "", "two", t2)
	if c := meta.FindStatusCondition(obj.Status.Conditions, CondProgressing); !c.LastTransitionTime.Equal(&t1) || c.Message != "two" {
		t.Errorf("Progressing %+v, want its first transition time kept and the new message", c)
	}
	setStatus(obj, rollout.Status{Phase: rollout.PhaseSucceeded}, "", "three", t2)
	if c := meta.FindStatusCondition(obj.Status.Conditions, CondSucceeded); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&t2) {
		t.Errorf("Succeeded %+v, want True since its transition", c)
	}
}

// TestPrevStatus: the engine is given the status's rollout only while the status is about the
// current spec; a new spec starts from nothing, so that it supersedes or starts rather than
// report the end of the last one.
func TestPrevStatus(t *testing.T) {
	obj := object(2, "Progressing")
	obj.Status.RolloutID, obj.Status.Batch = "r-1", 2
	if p := prevStatus(obj); p.RolloutID != "r-1" || p.Batch != 2 || p.Phase != rollout.PhaseProgressing {
		t.Errorf("prevStatus %+v, want the status's rollout", p)
	}
	obj.Status.ObservedGeneration = 1
	if p := prevStatus(obj); p.RolloutID != "" || p.Phase != "" {
		t.Errorf("prevStatus of an earlier spec's status %+v, want none", p)
	}
}
