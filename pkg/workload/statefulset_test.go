package workload

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// newStatefulSet is StatefulSet ns/web with 3 replicas at revision web-1, observed by its
// controller, under a RollingUpdate strategy with a partition.
func newStatefulSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "sts-uid", Generation: 4, ResourceVersion: "41"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(3)), Selector: webSelector(), Template: webTemplate("reg/app:v1"),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(1))}},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 4, UpdateRevision: "web-1", CurrentRevision: "web-1"},
	}
}

func stsPod(name, rev string) *corev1.Pod {
	return runningPod(name, "reg/app:v1", map[string]string{revisionLabel: rev}, controlledBy("StatefulSet", "web", "sts-uid"))
}

func TestStatefulSetLoad(t *testing.T) {
	tests := []struct {
		name     string
		modify   func(*appsv1.StatefulSet)
		pods     []*corev1.Pod
		want     []string
		replicas int
	}{
		{"highest ordinal first", nil,
			[]*corev1.Pod{stsPod("web-0", "web-1"), stsPod("web-2", "web-1"), stsPod("web-10", "web-1"), stsPod("web-1", "web-1")},
			[]string{"web-2", "web-1", "web-0"}, 3},
		{"ordinals start elsewhere", func(s *appsv1.StatefulSet) { s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5} },
			[]*corev1.Pod{stsPod("web-4", "web-1"), stsPod("web-5", "web-1"), stsPod("web-7", "web-1"), stsPod("web-8", "web-1")},
			[]string{"web-7", "web-5"}, 3},
		{"replicas unset means one", func(s *appsv1.StatefulSet) { s.Spec.Replicas = nil },
			[]*corev1.Pod{stsPod("web-0", "web-1"), stsPod("web-1", "web-1")}, []string{"web-0"}, 1},
		{"pods of another owner or none left out", nil,
			[]*corev1.Pod{stsPod("web-0", "web-1"), runningPod("web-1", "reg/app:v1", nil, controlledBy("StatefulSet", "web", "old-uid")), runningPod("web-2", "reg/app:v1", nil, nil)},
			[]string{"web-0"}, 3},
		{"a pod without an ordinal is not the rollout's", nil,
			[]*corev1.Pod{stsPod("web-0", "web-1"), stsPod("web-debug", "web-1")}, []string{"web-0"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := newStatefulSet()
			if tt.modify != nil {
				tt.modify(sts)
			}
			objects := []runtime.Object{sts}
			for _, p := range tt.pods {
				objects = append(objects, p)
			}
			w := mustLoad(t, fake.NewClientset(objects...), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
			var names []string
			for _, p := range w.Pods() {
				names = append(names, p.Name)
			}
			if !reflect.DeepEqual(names, tt.want) {
				t.Errorf("pods %v, want %v", names, tt.want)
			}
			if w.Replicas() != tt.replicas {
				t.Errorf("Replicas() = %d, want %d", w.Replicas(), tt.replicas)
			}
			if got := w.Ref(); got != (Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"}) {
				t.Errorf("Ref() = %v", got)
			}
			if w.Template() == nil || w.Template().Spec.Containers[0].Image != "reg/app:v1" {
				t.Errorf("Template() = %v, want the StatefulSet's", w.Template())
			}
			if w.Lock() != nil {
				t.Errorf("Lock() = %+v, want none", w.Lock())
			}
		})
	}
}

func TestStatefulSetCheckStart(t *testing.T) {
	images := map[string]string{"app": "reg/app:v2"}
	tests := []struct {
		name     string
		modify   func(*appsv1.StatefulSet)
		pods     []*corev1.Pod
		images   map[string]string
		want     string
		notReady bool
	}{
		{"every pod at the template's revision", nil, []*corev1.Pod{stsPod("web-0", "web-1"), stsPod("web-1", "web-1")}, images, "", false},
		{"no pods yet", nil, nil, images, "", false},
		{"unknown container", nil, nil, map[string]string{"db": "reg/db:v2"}, `StatefulSet ns/web: no container named "db"`, false},
		{"generation not observed", func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 3 }, nil, images,
			"StatefulSet ns/web: the StatefulSet controller has not observed generation 4 yet", true},
		{"no update revision yet", func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "" }, nil, images,
			"StatefulSet ns/web: the StatefulSet controller has not observed generation 4 yet", true},
		{"unfinished rollout", func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "web-2" },
			[]*corev1.Pod{stsPod("web-0", "web-1"), stsPod("web-1", "web-2")}, images,
			"StatefulSet ns/web has an unfinished rollout: pod web-0 is at revision web-1, not the template's web-2; finish or undo it first", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := newStatefulSet()
			if tt.modify != nil {
				tt.modify(sts)
			}
			objects := []runtime.Object{sts}
			for _, p := range tt.pods {
				objects = append(objects, p)
			}
			w := mustLoad(t, fake.NewClientset(objects...), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
			err := w.CheckStart(Images(tt.images), false)
			checkStartError(t, err, tt.want, tt.notReady)
		})
	}
}

// checkStartError checks that err says want (none when empty) and is a *NotReadyError when
// notReady, else an *InvalidError.
func checkStartError(t *testing.T, err error, want string, notReady bool) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("refused: %v", err)
		}
		return
	}
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
	var nr *NotReadyError
	var invalid *InvalidError
	switch {
	case notReady && !errors.As(err, &nr):
		t.Errorf("error %T, want *NotReadyError (try again)", err)
	case !notReady && !errors.As(err, &invalid):
		t.Errorf("error %T, want *InvalidError (bad input)", err)
	}
}

func TestStatefulSetRevisionLabelsAndCounted(t *testing.T) {
	target := map[string]string{"app": "reg/app:v2"}
	tests := []struct {
		name       string
		modify     func(*appsv1.StatefulSet)
		wantLabels map[string]string
		wantOK     bool
	}{
		{"template at the target", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Image = "reg/app:v2"
			s.Status.UpdateRevision = "web-2"
		}, map[string]string{revisionLabel: "web-2"}, true},
		{"template not at the target yet", nil, nil, false},
		{"template written, not observed", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Image = "reg/app:v2"
			s.Generation = 5
		}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := newStatefulSet()
			if tt.modify != nil {
				tt.modify(sts)
			}
			w := mustLoad(t, fake.NewClientset(sts), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
			labels, ok, err := w.RevisionLabels(Images(target))
			if err != nil || ok != tt.wantOK || !reflect.DeepEqual(labels, tt.wantLabels) {
				t.Errorf("RevisionLabels = %v, %v, %v; want %v, %v", labels, ok, err, tt.wantLabels, tt.wantOK)
			}
		})
	}

	w := mustLoad(t, fake.NewClientset(newStatefulSet()), Ref{Kind: StatefulSet, Namespace: "ns", Name: "web"})
	labels := map[string]string{revisionLabel: "web-2"}
	pod := func(image, rev string) *corev1.Pod {
		return runningPod("web-0", image, map[string]string{revisionLabel: rev}, nil)
	}
	counted := []struct {
		pod  *corev1.Pod
		want bool
	}{
		{pod("reg/app:v2", "web-2"), true},
		{pod("reg/app:v2", "web-1"), false},
		{pod("reg/app:v1", "web-2"), false},
		{pod("reg/app:v1", "web-1"), false},
	}
	for _, c := range counted {
		if got := w.Counted(c.pod, Images(target), labels); got != c.want {
			t.Errorf("Counted(pod at %s, revision %s) = %v, want %v", c.pod.Spec.Containers[0].Image, c.pod.Labels[revisionLabel], got, c.want)
		}
	}
}
