package workload

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestLoadLeavesOutPodsThatCanNoLongerRun(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	client := fake.NewClientset(
		pod("web-running", corev1.PodRunning),
		pod("web-pending", corev1.PodPending),
		pod("web-evicted", corev1.PodFailed),
		pod("web-completed", corev1.PodSucceeded),
	)
	w, err := Load(context.Background(), client, Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "web-pending" || names[1] != "web-running" {
		t.Errorf("pods %v, want [web-pending web-running]", names)
	}
}

func TestStatefulSetLeavesOutPodsBeingScaledAway(t *testing.T) {
	replicas := int32(2)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "sts-uid"},
		Spec:       appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	objects := []runtime.Object{sts}
	for _, name := range []string{"web-0", "web-1", "web-2", "web-3"} {
		objects = append(objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	w, err := Load(context.Background(), fake.NewClientset(objects...), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "web-1" || names[1] != "web-0" {
		t.Errorf("pods %v, want [web-1 web-0]: web-2 and web-3 are past the 2 replicas", names)
	}
}

func TestImagesCompareHoweverSpelled(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "docker.io/library/nginx:1.26"}}}}
	tmpl := &corev1.PodTemplateSpec{Spec: pod.Spec}
	tests := []struct {
		target string
		want   bool
	}{
		{"nginx:1.26", true},
		{"docker.io/library/nginx:1.26", true},
		{"nginx:1.27", false},
		{"nginx", false},
	}
	for _, tt := range tests {
		images := map[string]string{"web": tt.target}
		if got := RunsImages(pod, images); got != tt.want {
			t.Errorf("RunsImages(%s) = %v, want %v", tt.target, got, tt.want)
		}
		if got := TemplateHasImages(tmpl, images); got != tt.want {
			t.Errorf("TemplateHasImages(%s) = %v, want %v", tt.target, got, tt.want)
		}
	}
}

func TestLabelSelectedPodsThatCannotBeUpdatedAreRefused(t *testing.T) {
	owner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "api-5d8f", UID: "rs-uid", Controller: ptr.To(true)}}
	tests := []struct {
		name       string
		policy     corev1.RestartPolicy
		owners     []metav1.OwnerReference
		allowOwned bool
		want       string
	}{
		{"always", corev1.RestartPolicyAlways, nil, false, ""},
		{"default policy", "", nil, false, ""},
		{"never", corev1.RestartPolicyNever, nil, false, "pod ns/p: its restartPolicy is Never"},
		{"on failure", corev1.RestartPolicyOnFailure, nil, false, "pod ns/p: its restartPolicy is OnFailure"},
		{"owned", corev1.RestartPolicyAlways, owner, false, "pod ns/p is controlled by ReplicaSet/api-5d8f"},
		{"owned, allowed", corev1.RestartPolicyAlways, owner, true, ""},
		{"owned, not as controller", corev1.RestartPolicyAlways, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "c-uid"}}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "web"}, OwnerReferences: tt.owners},
				Spec:       corev1.PodSpec{RestartPolicy: tt.policy, Containers: []corev1.Container{{Name: "app", Image: "reg/app:v1"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning},
			}
			w, err := Load(context.Background(), fake.NewClientset(pod), Ref{Kind: Pods, Namespace: "ns", Selector: "app=web"})
			if err != nil {
				t.Fatal(err)
			}
			err = w.CheckStart(map[string]string{"app": "reg/app:v2"}, false)
			if err == nil {
				err = CheckOwned(w, tt.allowOwned)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
			var invalid *InvalidError
			if err != nil && !errors.As(err, &invalid) {
				t.Errorf("error %T, want *InvalidError (bad input, nothing written)", err)
			}
		})
	}
}
