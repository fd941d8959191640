package inplace

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestUpdaterRereadsAndDecidesAgainOnConflict(t *testing.T) {
	client := fake.NewClientset(testPod())
	var gets, patches int
	client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "web-0", nil)
		}
		return false, nil, nil
	})
	u := &Updater{Client: client, Now: func() time.Time { return t0 }}
	res, err := u.Update(context.Background(), "ns", "web-0", Target{Images: map[string]string{"app": "reg.example/app:v2"}, RolloutID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if gets != 2 || patches != 2 {
		t.Errorf("gets = %d, patches = %d; want the pod read again and the write retried once", gets, patches)
	}
	if !res.Wrote || res.Stage != StageUpdating {
		t.Errorf("result = %+v, want a write to Updating", res)
	}
	pod, err := client.CoreV1().Pods("ns").Get(context.Background(), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.Containers[0].Image != "reg.example/app:v2" || mustState(t, pod).Stage != StageUpdating {
		t.Errorf("pod after retry: image %s, state %s", pod.Spec.Containers[0].Image, pod.Annotations[StateAnnotation])
	}
}

func TestNextRevertOfANeverPatchedPodOnlyClearsItsState(t *testing.T) {
	tests := []struct {
		name  string
		stage Stage
		gate  bool
	}{
		{"preparing, no readiness gate", StagePreparing, false},
		{"draining behind the readiness gate", StageDraining, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.gate {
				pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: ReadinessGate}}
				pod.Status.Conditions = []corev1.PodCondition{{Type: ReadinessGate, Status: corev1.ConditionFalse}}
			}
			st := &State{RolloutID: "r1", Stage: tt.stage, StageAt: t0, Containers: []ContainerState{{
				Name: "app", BeforeImage: "reg.example/app:v1", AfterImage: "reg.example/app:v2",
			}}}
			pod.Annotations = map[string]string{StateAnnotation: st.encode()}

			s, err := NextRevert(pod, Options{}, t0.Add(time.Second), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Done || s.Stage != StageRolledBack {
				t.Errorf("step = %+v, want done, RolledBack", s)
			}
			next := apply(t, pod, s)
			if _, ok := next.Annotations[StateAnnotation]; ok {
				t.Errorf("state annotation still present: %s", next.Annotations[StateAnnotation])
			}
			if next.Spec.Containers[0].Image != "reg.example/app:v1" {
				t.Errorf("image changed to %s", next.Spec.Containers[0].Image)
			}
			if tt.gate && (len(next.Status.Conditions) == 0 || next.Status.Conditions[0].Status != corev1.ConditionTrue) {
				t.Errorf("readiness gate not lifted: %+v", next.Status.Conditions)
			}
		})
	}
}

func TestNextRevertLooksAgainAtAFailedRevert(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	crashing := corev1.ContainerStatus{Name: "app", Image: "reg.example/app:v1", ImageID: beforeID, RestartCount: 7,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}
	tests := []struct {
		name   string
		status corev1.ContainerStatus
		want   Stage
		write  bool
	}{
		{"still failing: stays Failed, writes nothing", crashing, StageFailed, false},
		{"back on its old image since: RolledBack", running("app", "reg.example/app:v1", beforeID, 8), StageRolledBack, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Status.ContainerStatuses[0] = tt.status
			st := &State{RolloutID: "r1", Stage: StageFailed, StageAt: t0, Reason: "rollback failed: CrashLoopBackOff", Containers: []ContainerState{{
				Name: "app", BeforeImage: "reg.example/app:v1", BeforeImageID: beforeID, AfterImage: "reg.example/app:v2", RevertImage: "reg.example/app:v1"}}}
			pod.Annotations = map[string]string{StateAnnotation: st.encode()}

			s, err := NextRevert(pod, Options{}, t0.Add(time.Hour), nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Stage != tt.want || !s.Done || (s.Patch != nil) != tt.write {
				t.Fatalf("step = stage %s, done %v, patch %s; want stage %s, done, write %v", s.Stage, s.Done, s.Patch, tt.want, tt.write)
			}
			if tt.write {
				if got := mustState(t, apply(t, pod, s)); got.Stage != StageRolledBack {
					t.Errorf("state after the write: %+v", got)
				}
			}
		})
	}
}
