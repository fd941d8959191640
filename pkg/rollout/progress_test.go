package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUnreadySince(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := func(created time.Time, ready *corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		if ready != nil {
			p.Status.Conditions = []corev1.PodCondition{*ready}
		}
		return p
	}
	cond := func(s corev1.ConditionStatus, at time.Time) *corev1.PodCondition {
		return &corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"not Ready since before the start", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start.Add(-time.Minute))), true},
		{"not Ready since the same second", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start)), true},
		{"went down during the rollout", pod(start.Add(-time.Hour), cond(corev1.ConditionFalse, start.Add(time.Second))), false},
		{"Ready", pod(start.Add(-time.Hour), cond(corev1.ConditionTrue, start.Add(-time.Minute))), false},
		{"no condition, created before", pod(start.Add(-time.Hour), nil), true},
		{"no condition, created during the rollout", pod(start.Add(time.Minute), nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unreadySince(tt.pod, start); got != tt.want {
				t.Errorf("unreadySince = %v, want %v", got, tt.want)
			}
		})
	}
}
