package workload

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// newDaemonSet is DaemonSet ns/agent at template generation 3, observed by its controller,
// scheduled on 2 nodes.
func newDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns", UID: "ds-uid", Generation: 3, ResourceVersion: "51",
			Annotations: map[string]string{templateGenerationAnnotation: "3"}},
		Spec:   appsv1.DaemonSetSpec{Selector: webSelector(), Template: webTemplate("reg/app:v1")},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2},
	}
}

func dsRevision(name string, revision int64, hash string, owner types.UID) *appsv1.ControllerRevision {
	r := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"}},
		Revision:   revision,
	}
	if hash != "" {
		r.Labels[revisionLabel] = hash
	}
	if owner != "" {
		r.OwnerReferences = controlledBy("DaemonSet", "agent", owner)
	}
	return r
}

func dsPod(name, hash, gen string) *corev1.Pod {
	return runningPod(name, "reg/app:v1", map[string]string{revisionLabel: hash, templateGenerationLabel: gen}, controlledBy("DaemonSet", "agent", "ds-uid"))
}

// dsRevisions are the DaemonSet's revisions 1 and 2 (hash "h2", the newest) and a newer one
// of another owner.
func dsRevisions() []runtime.Object {
	return []runtime.Object{
		dsRevision("agent-h1", 1, "h1", "ds-uid"),
		dsRevision("agent-h2", 2, "h2", "ds-uid"),
		dsRevision("other-h9", 9, "h9", "other-uid"),
	}
}

func loadDaemonSetWith(t *testing.T, ds *appsv1.DaemonSet, objects ...runtime.Object) Workload {
	t.Helper()
	return mustLoad(t, fake.NewClientset(append(objects, ds)...), Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"})
}

func TestDaemonSetLoad(t *testing.T) {
	objects := append(dsRevisions(), dsPod("agent-b", "h2", "3"), dsPod("agent-a", "h2", "3"),
		runningPod("agent-c", "reg/app:v1", nil, controlledBy("DaemonSet", "agent", "other-uid")))
	w := loadDaemonSetWith(t, newDaemonSet(), objects...)
	var names []string
	for _, p := range w.Pods() {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"agent-a", "agent-b"}) {
		t.Errorf("pods %v, want [agent-a agent-b]", names)
	}
	if w.Replicas() != 2 {
		t.Errorf("Replicas() = %d, want the 2 scheduled", w.Replicas())
	}
	if w.Ref() != (Ref{Kind: DaemonSet, Namespace: "ns", Name: "agent"}) || w.Lock() != nil || w.Template().Spec.Containers[0].Image != "reg/app:v1" {
		t.Errorf("Ref %v, Lock %v, Template %v", w.Ref(), w.Lock(), w.Template())
	}
	if rev := w.(*daemonSet).revision; rev == nil || rev.Name != "agent-h2" {
		t.Errorf("revision %v, want agent-h2, the newest the DaemonSet owns", rev)
	}
}

func TestDaemonSetCheckStart(t *testing.T) {
	images := map[string]string{"app": "reg/app:v2"}
	tests := []struct {
		name     string
		modify   func(*appsv1.DaemonSet)
		objects  []runtime.Object
		images   map[string]string
		want     string
		notReady bool
	}{
		{"pods at the newest revision", nil, append(dsRevisions(), dsPod("agent-a", "h2", "3")), images, "", false},
		{"pod at the template generation only", nil, append(dsRevisions(), dsPod("agent-a", "h1", "3")), images, "", false},
		{"pod at the hash only", nil, append(dsRevisions(), dsPod("agent-a", "h2", "2")), images, "", false},
		{"init container not asked for", nil, dsRevisions(), map[string]string{"init": "reg/init:v2"}, `DaemonSet ns/agent: "init" is an init container`, false},
		{"unfinished rollout", nil, append(dsRevisions(), dsPod("agent-a", "h2", "3"), dsPod("agent-b", "h1", "2")), images,
			"DaemonSet ns/agent has an unfinished rollout: pod agent-b is at revision h1, not the template's h2; finish or undo it first", false},
		{"generation not observed", func(d *appsv1.DaemonSet) { d.Status.ObservedGeneration = 2 }, dsRevisions(), images,
			"DaemonSet ns/agent: the DaemonSet controller has not observed generation 3 yet", true},
		{"no revision yet", nil, []runtime.Object{dsRevision("other-h9", 9, "h9", "other-uid")}, images,
			"DaemonSet ns/agent: the DaemonSet controller has not observed generation 3 yet", true},
		{"revision without a hash", nil, []runtime.Object{dsRevision("agent-x", 1, "", "ds-uid")}, images,
			"DaemonSet ns/agent: the DaemonSet controller has not observed generation 3 yet", true},
		{"no template generation", func(d *appsv1.DaemonSet) { d.Annotations = nil }, dsRevisions(), images,
			"DaemonSet ns/agent: the DaemonSet controller has not observed generation 3 yet", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDaemonSet()
			if tt.modify != nil {
				tt.modify(ds)
			}
			w := loadDaemonSetWith(t, ds, tt.objects...)
			checkStartError(t, w.CheckStart(Images(tt.images), false), tt.want, tt.notReady)
		})
	}
}

func TestDaemonSetRevisionLabelsAndCounted(t *testing.T) {
	target := map[string]string{"app": "reg/app:v2"}
	atTarget := func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers[0].Image = "reg/app:v2" }
	tests := []struct {
		name       string
		modify     func(*appsv1.DaemonSet)
		wantLabels map[string]string
		wantOK     bool
	}{
		{"template at the target", atTarget, map[string]string{revisionLabel: "h2", templateGenerationLabel: "3"}, true},
		{"template not at the target", nil, nil, false},
		{"template written, not observed", func(d *appsv1.DaemonSet) { atTarget(d); d.Generation = 4 }, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDaemonSet()
			if tt.modify != nil {
				tt.modify(ds)
			}
			w := loadDaemonSetWith(t, ds, dsRevisions()...)
			labels, ok, err := w.RevisionLabels(Images(target))
			if err != nil || ok != tt.wantOK || !reflect.DeepEqual(labels, tt.wantLabels) {
				t.Errorf("RevisionLabels = %v, %v, %v; want %v, %v", labels, ok, err, tt.wantLabels, tt.wantOK)
			}
		})
	}

	w := loadDaemonSetWith(t, newDaemonSet())
	labels := map[string]string{revisionLabel: "h3", templateGenerationLabel: "4"}
	pod := func(image, hash, gen string) *corev1.Pod {
		p := dsPod("agent-a", hash, gen)
		p.Spec.Containers[0].Image = image
		return p
	}
	counted := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"new images, new hash and generation", pod("reg/app:v2", "h3", "4"), true},
		{"new images, new hash", pod("reg/app:v2", "h3", "3"), true},
		{"new images, new generation", pod("reg/app:v2", "h2", "4"), true},
		{"new images, old revision", pod("reg/app:v2", "h2", "3"), false},
		{"old images, new revision", pod("reg/app:v1", "h3", "4"), false},
	}
	for _, c := range counted {
		if got := w.Counted(c.pod, Images(target), labels); got != c.want {
			t.Errorf("Counted(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
