package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// planStatefulSet is a StatefulSet shop/web whose controller is caught up, with a pod per image
// given (web-0 runs images[0]), each Ready at the update revision. lock, when not nil, is its
// lock annotation.
func planStatefulSet(lock *Record, images ...string) []runtime.Object {
	replicas := int32(len(images))
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "sts-uid", Generation: 1},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "reg/app:v1"}}},
			},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: "web-1", CurrentRevision: "web-1"},
	}
	if lock != nil {
		data, err := json.Marshal(lock)
		if err != nil {
			panic(err)
		}
		sts.Annotations = map[string]string{workload.LockAnnotation: string(data)}
	}
	objs := []runtime.Object{sts}
	for i, img := range images {
		objs = append(objs, planPod(fmt.Sprintf("web-%d", i), img, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: ptrTo(true)}))
	}
	return objs
}

// planPod is a Ready pod labelled app=web at revision web-1, running image.
func planPod(name, image string, owner metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "web", "controller-revision-hash": "web-1"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if owner.Name != "" {
		p.OwnerReferences = []metav1.OwnerReference{owner}
	}
	return p
}

func ptrTo[T any](v T) *T { return &v }

// withState gives the pod named name among objs the state annotation raw.
func withState(objs []runtime.Object, name, raw string) []runtime.Object {
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name == name {
			p.Annotations = map[string]string{inplace.StateAnnotation: raw}
		}
	}
	return objs
}

// noWrites fails the test if the client was asked for anything but reads.
func noWrites(t *testing.T, client *fake.Clientset) {
	t.Helper()
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("%s %s: the engine wrote while only reading", v, a.GetResource().Resource)
		}
	}
}

func TestPlan(t *testing.T) {
	v1, v2 := "reg/app:v1", "reg/app:v2"
	sts := workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}
	pods := workload.Ref{Kind: workload.Pods, Namespace: "shop", Selector: "app=web"}
	spec := func(target workload.Ref, images map[string]string, batches ...intstr.IntOrString) Spec {
		return Spec{Target: target, Holder: "cli", Images: images, Batches: batches, MaxUnavailable: intstr.FromInt32(1), Timeout: inplace.DefaultProgressDeadline}
	}
	app2 := map[string]string{"app": v2}
	thirds := []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("50%"), intstr.FromString("100%")}
	tests := []struct {
		name    string
		objs    []runtime.Object
		spec    Spec
		want    Plan
		wantErr string // a part of the *InvalidError's message
		wantFix Fix
	}{
		{"highest ordinal first, batch by batch",
			planStatefulSet(nil, v1, v1, v1, v1, v1), spec(sts, app2, thirds...),
			Plan{Target: sts, Current: map[string]string{"app": v1}, Images: map[string]string{"app": v2}, Batches: []PlannedBatch{
				{Upto: 1, Pods: []string{"web-4"}}, {Upto: 3, Pods: []string{"web-3", "web-2"}}, {Upto: 5, Pods: []string{"web-1", "web-0"}}}},
			"", ""},
		{"pods already on the images count first",
			planStatefulSet(nil, v1, v1, v1, v2, v1), spec(sts, app2, thirds...),
			Plan{Target: sts, Current: map[string]string{"app": v1}, Images: map[string]string{"app": v2}, Already: []string{"web-3"}, Batches: []PlannedBatch{
				{Upto: 1}, {Upto: 3, Pods: []string{"web-4", "web-2"}}, {Upto: 5, Pods: []string{"web-1", "web-0"}}}},
			"", ""},
		{"label-selected pods by name, each current image counted",
			[]runtime.Object{planPod("b", v1, metav1.OwnerReference{}), planPod("a", "reg/app:v0", metav1.OwnerReference{})},
			spec(pods, app2),
			Plan{Target: pods, Current: map[string]string{"app": "reg/app:v0 (1 pods) | reg/app:v1 (1 pods)"}, Images: map[string]string{"app": v2}, Batches: []PlannedBatch{{Upto: 2, Pods: []string{"a", "b"}}}},
			"", ""},
		{"an unreadable state is refused as a start refuses it",
			withState(planStatefulSet(nil, v1, v1), "web-0", "{not json"), spec(sts, app2),
			Plan{}, "web-0", FixStateAnnotation},
		{"an unknown container",
			planStatefulSet(nil, v1), spec(sts, map[string]string{"db": v2}),
			Plan{}, `"db"`, ""},
		{"no such workload",
			nil, spec(sts, app2),
			Plan{}, "not found", ""},
		{"batches that do not resolve",
			planStatefulSet(nil, v1, v1, v1, v1), spec(sts, app2, intstr.FromInt32(3), intstr.FromString("50%"), intstr.FromString("100%")),
			Plan{}, "fewer than the 3 of the batch before it", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objs...)
			got, err := (&Engine{Client: client}).Plan(context.Background(), tt.spec)
			t.Cleanup(func() { noWrites(t, client) })
			if tt.wantErr != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.wantErr) || inv.Fix != tt.wantFix {
					t.Fatalf("Plan: %v (%T); want an *InvalidError naming %q with fix %q", err, err, tt.wantErr, tt.wantFix)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Plan:\n%+v\nwant:\n%+v", got, tt.want)
			}
		})
	}
}

func TestAssignBatches(t *testing.T) {
	pods := []string{"p0", "p1", "p2", "p3"}
	tests := []struct {
		name    string
		counts  []int
		already int
		pending []string
		want    [][]string
	}{
		{"in order, up to each count", []int{1, 3, 4}, 0, pods, [][]string{{"p0"}, {"p1", "p2"}, {"p3"}}},
		{"already updated pods fill the first batches", []int{1, 3, 6}, 2, pods, [][]string{nil, {"p0"}, {"p1", "p2", "p3"}}},
		{"fewer pods than the counts", []int{2, 10}, 0, pods[:3], [][]string{{"p0", "p1"}, {"p2"}}},
		{"nothing pending", []int{1, 2}, 2, nil, [][]string{nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := assignBatches(tt.counts, tt.already, tt.pending); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("assignBatches(%v, %d, %v) = %q, want %q", tt.counts, tt.already, tt.pending, got, tt.want)
			}
		})
	}
}

func TestReport(t *testing.T) {
	lock := &Record{Holder: "cli", RolloutID: "r-2", Superseded: []string{"r-1"}, Images: map[string]string{"app": "reg/app:v2"},
		PreviousImages: map[string]string{"app": "reg/app:v1"}, Phase: PhaseProgressing}
	state := func(id string, stage inplace.Stage) string {
		data, err := json.Marshal(inplace.State{RolloutID: id, Stage: stage, StageAt: t0, Containers: []inplace.ContainerState{{Name: "app", BeforeImage: "reg/app:v1", AfterImage: "reg/app:v2"}}})
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	objs := planStatefulSet(lock, "reg/app:v1", "reg/app:v2", "reg/app:v2", "reg/app:v1")
	objs = withState(objs, "web-1", state("r-2", inplace.StageUpdated))
	objs = withState(objs, "web-2", state("r-1", inplace.StageUpdating))
	objs = withState(objs, "web-3", state("r-0", inplace.StageRolledBack))
	client := fake.NewClientset(objs...)
	t.Cleanup(func() { noWrites(t, client) })
	// Reported when the states were written: the Updating one is within its progress deadline.
	got, err := (&Engine{Client: client, Now: func() time.Time { return t0 }}).Report(context.Background(), workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if got.Target != "StatefulSet shop/web" || got.Lock == nil || got.Lock.RolloutID != "r-2" {
		t.Errorf("report of %q with lock %+v, want StatefulSet shop/web with rollout r-2", got.Target, got.Lock)
	}
	// name: stage, reason; in update order, highest ordinal first.
	var rows []string
	for _, p := range got.Pods {
		rows = append(rows, fmt.Sprintf("%s: %s, %s", p.Name, p.Stage, p.Reason))
	}
	want := []string{
		"web-3: , last changed by an earlier rollout, r-0 (RolledBack)",
		"web-2: Updating, ",
		"web-1: Updated, ",
		"web-0: , ",
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if p := got.Pods[0]; p.Node != "node-1" || p.IP != "10.0.0.1" || !p.Ready || p.Images["app"] != "reg/app:v1" {
		t.Errorf("row %+v, want node-1, 10.0.0.1, Ready, on reg/app:v1", p)
	}

	_, err = (&Engine{Client: fake.NewClientset()}).Report(context.Background(), workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "gone"})
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Report of a missing StatefulSet: %v (%T), want an *InvalidError saying not found", err, err)
	}
}

func TestRolloutContainers(t *testing.T) {
	row := PodReport{Images: map[string]string{"app": "a", "sidecar": "s", "init": "i"}}
	tests := []struct {
		name string
		lock *Record
		want []string
	}{
		{"no rollout: every container", nil, []string{"app", "init", "sidecar"}},
		{"the rollout's containers", &Record{Images: map[string]string{"sidecar": "s2", "app": "a2"}}, []string{"app", "sidecar"}},
		{"a container the rollout resizes", &Record{Images: map[string]string{"app": "a2"}, Resources: map[string]inplace.Resources{"sidecar": resourcesOf("cpu=1", "")}},
			[]string{"app", "sidecar"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := row.RolloutContainers(tt.lock); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RolloutContainers = %v, want %v", got, tt.want)
			}
		})
	}
}
