package controller_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestApplyResizesInPlace: an applied InPlaceRollout with resources and no images resizes a
// StatefulSet's pods in place: the same pods, the kubelet reporting the new CPU, and the template
// handed back with it. The CRD takes resources as a container's resources are written.
func TestApplyResizesInPlace(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSetWith(t, env, ns, "web", 3, func(tmpl *corev1.PodTemplateSpec) {
		tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
		}
	})
	before := recordPods(t, ns, "web")

	applyRollout(t, ns, "web", "  target: {kind: StatefulSet, name: web}\n  resources: {app: {requests: {cpu: 150m}, limits: {cpu: \"0.3\"}}}\n  batches: [1, \"100%\"]\n  timeout: 2m")
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	_, obj := waitRollout(t, ns, "web", "succeeded", func(o *v1alpha1.InPlaceRollout) bool { return o.Status.Phase == "Succeeded" })
	if s := obj.Status; s.Updated != 3 || s.Total != 3 {
		t.Errorf("status %+v, want 3 of 3 updated", s)
	}
	checkSamePods(t, ns, "web", before, true)
	for _, p := range clitest.ListPods(t, env, ns, "app=web") {
		cs := cluster.ContainerStatus(&p, "app")
		if cs == nil || cs.Resources == nil || cs.Resources.Requests.Cpu().String() != "150m" || cs.Resources.Limits.Cpu().String() != "300m" {
			t.Errorf("pod %s: the kubelet reports app runs with %v, want cpu 150m/300m", p.Name, cs)
		}
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := sts.Spec.Template.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "150m" || r.Limits.Cpu().String() != "300m" {
		t.Errorf("StatefulSet %s/web's template has app %v, want cpu 150m/300m", ns, r)
	}
}
