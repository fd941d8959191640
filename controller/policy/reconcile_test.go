package policy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// revisionOf is ControllerRevision name of StatefulSet web, whose template runs image with
// the version label, as its controller records it.
func revisionOf(t *testing.T, name string, number int64, image, version string) *appsv1.ControllerRevision {
	t.Helper()
	tmpl := podTemplate(image, map[string]string{"app": "web", "app.kubernetes.io/version": version})
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: ptr.To(true)}}},
		Revision: number, Data: runtime.RawExtension{Raw: raw},
	}
}

// fakeCluster is StatefulSet ns/web under policy p, OnDelete, whose owner applied revision web-2
// (reg/app:v2) while its two pods run web-1 (reg/app:v1); strategy is its update strategy.
func fakeCluster(t *testing.T, strategy appsv1.StatefulSetUpdateStrategyType) (*kubefake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "sts-uid", Generation: 2,
			Annotations: map[string]string{v1alpha1.PolicyAnnotation: "p"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template:       podTemplate("reg/app:v2", map[string]string{"app": "web", "app.kubernetes.io/version": "2"}),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, CurrentRevision: "web-1", UpdateRevision: "web-2"},
	}
	objs := []runtime.Object{sts, revisionOf(t, "web-1", 1, "reg/app:v1", "1"), revisionOf(t, "web-2", 2, "reg/app:v2", "2")}
	for _, name := range []string{"web-0", "web-1"} {
		since := metav1.NewTime(t0.Add(-time.Hour))
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
				Labels:          map[string]string{"app": "web", "app.kubernetes.io/version": "1", appsv1.ControllerRevisionHashLabelKey: "web-1"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "node-1", RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "app", Image: "reg/app:v1"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "reg/app:v1", ImageID: "reg/app@sha256:" + strings.Repeat("1", 64),
					Ready: true, Started: ptr.To(true), ContainerID: "containerd://" + name,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}}}},
		})
	}
	kube := kubefake.NewClientset(objs...)
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.PolicyKind,
		"metadata": map[string]any{"namespace": "ns", "name": "p", "uid": "p-uid", "generation": int64(1), "resourceVersion": "1"},
		"spec":     map[string]any{"batches": []any{int64(1), "100%"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: v1alpha1.PolicyKind + "List"}, policy)
	return kube, dyn
}

// recordedEvent is an Event recorded, with what it regards.
type recordedEvent struct {
	regarding corev1.ObjectReference
	ev        inplace.Event
}

// events are the Events recorded, in order.
type events []recordedEvent

func (e *events) Record(_ context.Context, regarding corev1.ObjectReference, ev inplace.Event) error {
	*e = append(*e, recordedEvent{regarding, ev})
	return nil
}

// reconciler is a Reconciler on the fake clients, reading the policy from dyn as a cache would,
// its Events recorded into recorded.
func reconciler(kube *kubefake.Clientset, dyn *dynamicfake.FakeDynamicClient, recorded *events) *Reconciler {
	return &Reconciler{
		Engine: &rollout.Engine{Client: kube, Events: recorded, Now: func() time.Time { return t0 }},
		Kube:   kube, Policies: dyn, Now: func() time.Time { return t0 },
		Policy: func(ns, name string) (*unstructured.Unstructured, bool) {
			u, err := dyn.Resource(Resource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
			return u, err == nil
		},
		PoliciesIn: func(ns string) []*unstructured.Unstructured {
			list, err := dyn.Resource(Resource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return nil
			}
			var policies []*unstructured.Unstructured
			for i := range list.Items {
				policies = append(policies, &list.Items[i])
			}
			return policies
		},
	}
}

// entryOf is policy p's status of StatefulSet web, as stored.
func entryOf(t *testing.T, dyn *dynamicfake.FakeDynamicClient) v1alpha1.PolicyWorkloadStatus {
	t.Helper()
	u, err := dyn.Resource(Resource).Namespace("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := fromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.Workloads) != 1 {
		t.Fatalf("policy status %+v, want one workload", p.Status)
	}
	return p.Status.Workloads[0]
}

// TestReconcileStartsTheRolloutOfTheOwnersTemplate: the first step of a workload whose pods are
// behind its template writes the rollout's lock, and nothing of the StatefulSet's spec, and the
// policy's status says the rollout to revision web-2 is in progress.
func TestReconcileStartsTheRolloutOfTheOwnersTemplate(t *testing.T) {
	kube, dyn := fakeCluster(t, appsv1.OnDeleteStatefulSetStrategyType)
	before, err := kube.AppsV1().StatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := reconciler(kube, dyn, &events{})
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	requeue, err := r.Reconcile(context.Background(), target{ref: ref, policy: "p"})
	if err != nil || requeue <= 0 {
		t.Fatalf("Reconcile = %s, %v; want a requeue and no error", requeue, err)
	}
	lock, err := rollout.ReadRecord(context.Background(), kube, ref)
	if err != nil || lock == nil || !lock.TemplateOwned || lock.Holder != "policy:ns/p" || lock.Labels[appsv1.ControllerRevisionHashLabelKey] != "web-2" {
		t.Fatalf("lock %+v (%v); want the policy's rollout to the owner's template, revision web-2", lock, err)
	}
	after, err := kube.AppsV1().StatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equalJSON(t, after.Spec, before.Spec) {
		t.Errorf("the StatefulSet's spec changed: %+v, was %+v", after.Spec, before.Spec)
	}
	if e := entryOf(t, dyn); e.Revision != "web-2" || e.Phase != string(rollout.PhaseProgressing) || e.RolloutID != lock.RolloutID {
		t.Errorf("policy status %+v, want revision web-2 Progressing, rollout %s", e, lock.RolloutID)
	}
}

// TestReconcileRecordsAWorkloadNotOnDelete: a workload whose manifest does not say OnDelete is
// left alone, and the policy's status says why, as does one Warning Event on the workload, not
// repeated by the next reconcile.
func TestReconcileRecordsAWorkloadNotOnDelete(t *testing.T) {
	kube, dyn := fakeCluster(t, appsv1.RollingUpdateStatefulSetStrategyType)
	var recorded events
	r := reconciler(kube, dyn, &recorded)
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	for range 2 {
		if _, err := r.Reconcile(context.Background(), target{ref: ref, policy: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(recorded) != 1 || recorded[0].regarding.Kind != "StatefulSet" || recorded[0].regarding.UID != "sts-uid" ||
		recorded[0].ev.Type != corev1.EventTypeWarning || recorded[0].ev.Reason != EventNotApplied ||
		!strings.Contains(recorded[0].ev.Message, "InPlaceRolloutPolicy p: NotOnDelete: ") {
		t.Errorf("Events %+v; want one Warning %s on StatefulSet ns/web naming the policy and its entry", recorded, EventNotApplied)
	}
	if lock, err := rollout.ReadRecord(context.Background(), kube, ref); err != nil || lock != nil {
		t.Errorf("lock %+v (%v), want none", lock, err)
	}
	if e := entryOf(t, dyn); e.Phase != PhaseNotOnDelete || !strings.Contains(e.Message, "say updateStrategy OnDelete") {
		t.Errorf("policy status %+v, want %s saying what to do", e, PhaseNotOnDelete)
	}
}

// TestReconcileDropsTheEntryOfAWorkloadGone: a workload that no longer names the policy, or is
// deleted, loses its entry in the policy's status.
func TestReconcileDropsTheEntryOfAWorkloadGone(t *testing.T) {
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	tests := []struct {
		name string
		gone func(t *testing.T, kube *kubefake.Clientset) target
	}{
		{"names no policy", func(t *testing.T, kube *kubefake.Clientset) target {
			patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.PolicyAnnotation + `":null}}}`)
			if _, err := kube.AppsV1().StatefulSets("ns").Patch(context.Background(), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			return target{ref: ref}
		}},
		{"names another", func(t *testing.T, kube *kubefake.Clientset) target {
			patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.PolicyAnnotation + `":"q"}}}`)
			if _, err := kube.AppsV1().StatefulSets("ns").Patch(context.Background(), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			return target{ref: ref, policy: "q"}
		}},
		{"deleted", func(t *testing.T, kube *kubefake.Clientset) target {
			if err := kube.AppsV1().StatefulSets("ns").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return target{ref: ref}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube, dyn := fakeCluster(t, appsv1.RollingUpdateStatefulSetStrategyType)
			r := reconciler(kube, dyn, &events{})
			if _, err := r.Reconcile(context.Background(), target{ref: ref, policy: "p"}); err != nil {
				t.Fatal(err)
			}
			entryOf(t, dyn)
			tgt := tt.gone(t, kube)
			if requeue, err := r.Reconcile(context.Background(), tgt); err != nil || requeue <= 0 {
				t.Fatalf("Reconcile = %s, %v; want the entry dropped and a requeue", requeue, err)
			}
			u, err := dyn.Resource(Resource).Namespace("ns").Get(context.Background(), "p", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := fromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Status.Workloads) != 0 {
				t.Errorf("policy p's status %+v, want no entry of StatefulSet web", p.Status)
			}
			if requeue, err := r.Reconcile(context.Background(), tgt); err != nil || requeue != 0 {
				t.Errorf("Reconcile again = %s, %v; want nothing left to do", requeue, err)
			}
		})
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
