package gate

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

func TestDecide(t *testing.T) {
	gated := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns"},
			Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	withStage := func(stage inplace.Stage) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations = map[string]string{inplace.StateAnnotation: `{"rolloutID":"r","startedAt":"2026-01-01T00:00:00Z","containers":[],"stage":"` + string(stage) + `","stageAt":"2026-01-01T00:00:00Z"}`}
		}
	}
	withCondition := func(s corev1.ConditionStatus) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: inplace.ReadinessGate, Status: s}}
		}
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		want   bool
		reason string
	}{
		{"gate, no state, no condition", gated(nil), true, "no in-place update"},
		{"no readiness gate", &corev1.Pod{}, false, "does not declare"},
		{"another readiness gate only", &corev1.Pod{Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/other"}}}}, false, "does not declare"},
		{"condition already True", gated(withCondition(corev1.ConditionTrue)), false, "already set (True)"},
		{"condition already False: the engine's drain", gated(withCondition(corev1.ConditionFalse)), false, "already set (False)"},
		{"being deleted", gated(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), false, "being deleted"},
		{"stage Updated", gated(withStage(inplace.StageUpdated)), true, "ended (Updated)"},
		{"stage RolledBack", gated(withStage(inplace.StageRolledBack)), true, "ended (RolledBack)"},
		{"stage Preparing", gated(withStage(inplace.StagePreparing)), false, "stage Preparing"},
		{"stage Draining", gated(withStage(inplace.StageDraining)), false, "stage Draining"},
		{"stage Updating", gated(withStage(inplace.StageUpdating)), false, "stage Updating"},
		{"stage Failed", gated(withStage(inplace.StageFailed)), false, "stage Failed"},
		{"stage RollingBack", gated(withStage(inplace.StageRollingBack)), false, "stage RollingBack"},
		{"unknown stage", gated(withStage("Frobnicating")), false, `not a state this version writes: stage "Frobnicating" is none of`},
		{"state not JSON", gated(func(p *corev1.Pod) { p.Annotations = map[string]string{inplace.StateAnnotation: "{"} }), false, "not valid JSON"},
		{"empty state annotation", gated(func(p *corev1.Pod) { p.Annotations = map[string]string{inplace.StateAnnotation: ""} }), true, "no in-place update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Decide(tt.pod)
			if got != tt.want || !strings.Contains(reason, tt.reason) {
				t.Errorf("Decide = %v, %q; want %v and a reason containing %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}
