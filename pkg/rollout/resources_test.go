package rollout

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// resourcesOf builds a container's resources from "cpu=250m memory=64Mi" lists of requests
// and limits (either may be empty).
func resourcesOf(requests, limits string) corev1.ResourceRequirements {
	list := func(s string) corev1.ResourceList {
		if s == "" {
			return nil
		}
		out := corev1.ResourceList{}
		for _, kv := range strings.Fields(s) {
			name, q, _ := strings.Cut(kv, "=")
			out[corev1.ResourceName(name)] = resource.MustParse(q)
		}
		return out
	}
	return corev1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}
}

// burstable are the app container's resources in the clusters of these tests: a request below
// its limit.
var burstable = resourcesOf("cpu=250m memory=64Mi", "cpu=1 memory=128Mi")

// resourcesSpec is a rollout of the app container's resources alone, no image, one pod at a
// time.
func resourcesSpec(fc *fakeCluster, r corev1.ResourceRequirements) Spec {
	spec := fc.spec("", one, all)
	spec.Images = nil
	spec.Resources = map[string]inplace.Resources{testApp: r}
	return spec
}

// assertResources checks that the StatefulSet's template (when there is one) and every pod's
// spec and status give the app container the values of want, by quantity.
func (fc *fakeCluster) assertResources(want corev1.ResourceRequirements) {
	fc.t.Helper()
	if fc.kind == workload.StatefulSet {
		if have := fc.sts().Spec.Template.Spec.Containers[0].Resources; !inplace.HasResources(have, want) {
			fc.t.Errorf("template resources %v, want %v", have, want)
		}
	}
	for _, p := range fc.pods() {
		if have := p.Spec.Containers[0].Resources; !inplace.HasResources(have, want) {
			fc.t.Errorf("pod %s: spec resources %v, want %v", p.Name, have, want)
		}
		if cs := p.Status.ContainerStatuses[0]; cs.Resources == nil || !inplace.HasResources(*cs.Resources, want) {
			fc.t.Errorf("pod %s: running with resources %v, want %v", p.Name, cs.Resources, want)
		}
	}
}

// TestResourcesOnly: a rollout of resources alone, no image, resizes each pod in place with no
// restart, finalizes the StatefulSet's template with the resources (spelled another way, 0.5
// for 500m) and relabels each pod with the revision of that template, so that its controller,
// its strategy restored, recreates none; the lock records the values the template had before.
// Label-selected pods go the same way, with no template.
func TestResourcesOnly(t *testing.T) {
	for _, kind := range []workload.Kind{workload.StatefulSet, workload.Pods} {
		t.Run(string(kind), func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: kind, pods: 3, resources: burstable})
			var oldRevision string
			if kind == workload.StatefulSet {
				oldRevision = fc.sts().Status.UpdateRevision
			}
			restarts := fc.restarts()
			spec := resourcesSpec(fc, resourcesOf("cpu=0.5", ""))
			st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
			if st.Phase != PhaseSucceeded || st.Updated != 3 || !strings.Contains(st.Message, "handed back with the new resources") {
				t.Fatalf("status = %+v, want Succeeded with 3 pods updated, handed back with the new resources", st)
			}
			fc.play()
			fc.assertResources(resourcesOf("cpu=500m memory=64Mi", "cpu=1 memory=128Mi"))
			fc.assertOnImage(imageV1)
			if got := fc.restarts(); !maps.Equal(got, restarts) {
				t.Errorf("restarts %v, want %v: a resize restarts no container", got, restarts)
			}
			lock := fc.lock()
			if lock.Phase != PhaseSucceeded || len(lock.Images) != 0 || !inplace.HasResources(lock.Resources[testApp], resourcesOf("cpu=500m", "")) ||
				!inplace.HasResources(lock.PreviousResources[testApp], resourcesOf("cpu=250m", "")) || len(lock.PreviousResources[testApp].Limits) != 0 {
				t.Errorf("lock %+v: want Succeeded, no images, resources cpu 500m and previous resources cpu 250m alone", lock)
			}
			if kind != workload.StatefulSet {
				return
			}
			sts := fc.sts()
			if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("strategy %s after the rollout, want RollingUpdate back", sts.Spec.UpdateStrategy.Type)
			}
			if sts.Status.UpdateRevision == oldRevision {
				t.Errorf("the template's revision is still %s: its resources did not change", oldRevision)
			}
		})
	}
}

// TestResourcesPinNothing: a rollout of resources alone has no tag to pin and no image to pull,
// so pin-digests always starts it with no registry to ask, and pre-pull with no puller image.
func TestResourcesPinNothing(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2, resources: burstable})
	spec := resourcesSpec(fc, resourcesOf("cpu=500m", ""))
	spec.PinDigests, spec.PrePull = PinAlways, true
	st, _, err := fc.engine().Reconcile(context.Background(), spec, Status{})
	if err != nil || st.Phase != PhaseProgressing || st.RolloutID == "" {
		t.Fatalf("Reconcile = %+v, %v; want the rollout started", st, err)
	}
	if l := fc.lock(); len(l.Images) != 0 || len(l.BeforeImages) != 0 {
		t.Errorf("lock = %+v, want no images", l)
	}
	fc.play()
	if st = fc.mustDrive(fc.engine(), spec, st, nil); st.Phase != PhaseSucceeded {
		t.Errorf("status = %+v, want Succeeded", st)
	}
}

// TestResourcesBesideImages: a rollout of an image and resources together resizes, then
// patches the image, and leaves the template and the pods with both.
func TestResourcesBesideImages(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2, resources: burstable})
	spec := fc.spec(imageV2, one, all)
	spec.Resources = map[string]inplace.Resources{testApp: resourcesOf("memory=96Mi", "memory=256Mi")}
	st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
	if st.Phase != PhaseSucceeded || st.Updated != 2 {
		t.Fatalf("status = %+v, want Succeeded with 2 pods updated", st)
	}
	fc.play()
	fc.assertOnImage(imageV2)
	fc.assertResources(resourcesOf("cpu=250m memory=96Mi", "cpu=1 memory=256Mi"))
	if tmpl := fc.sts().Spec.Template.Spec.Containers[0]; tmpl.Image != imageV2 {
		t.Errorf("template image %s, want %s", tmpl.Image, imageV2)
	}
}

// TestResourcesRefused: resources a resize cannot set are bad input, refused before anything is
// written: the template (or, for label-selected pods, each pod) is what they are checked against.
func TestResourcesRefused(t *testing.T) {
	guaranteed := resourcesOf("cpu=1 memory=128Mi", "cpu=1 memory=128Mi")
	tests := []struct {
		name      string
		kind      workload.Kind
		resources corev1.ResourceRequirements
		setup     func(*fakeCluster)
		want      map[string]inplace.Resources
		says      string
	}{
		{name: "a limit below the request", resources: burstable, want: map[string]inplace.Resources{testApp: resourcesOf("cpu=2", "")},
			says: `StatefulSet shop/web: resources of container "app": cpu limit 1 is below its request 2`},
		{name: "a value the container does not declare", resources: resourcesOf("cpu=250m", ""), want: map[string]inplace.Resources{testApp: resourcesOf("memory=64Mi", "")},
			says: `resources of container "app": requests.memory: the container declares no memory request`},
		{name: "a QoS class change", resources: guaranteed, want: map[string]inplace.Resources{testApp: resourcesOf("cpu=500m", "")},
			says: "the pod's QoS class would change from Guaranteed to Burstable"},
		{name: "an unknown container", resources: burstable, want: map[string]inplace.Resources{"db": resourcesOf("cpu=500m", "")},
			says: `resources: no container named "db"`},
		{name: "an init container that runs once", resources: burstable, want: map[string]inplace.Resources{"init": resourcesOf("cpu=200m", "")},
			setup: func(fc *fakeCluster) {
				sts := fc.sts()
				sts.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: imageV1, Resources: resourcesOf("cpu=100m", "")}}
				if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
					fc.t.Fatal(err)
				}
			},
			says: `resources: "init" is an init container that runs once`},
		{name: "label-selected pods are checked each", kind: workload.Pods, resources: burstable,
			setup: func(fc *fakeCluster) {
				p := fc.pod("web-1")
				p.Spec.Containers[0].Resources = resourcesOf("cpu=250m", "cpu=250m")
				fc.updatePod(p)
			},
			want: map[string]inplace.Resources{testApp: resourcesOf("cpu=500m", "")},
			says: `pod shop/web-1: resources of container "app": cpu limit 250m is below its request 500m`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{kind: tt.kind, pods: 2, resources: tt.resources})
			if tt.setup != nil {
				tt.setup(fc)
			}
			spec := fc.spec(imageV2, one, all)
			spec.Images, spec.Resources = nil, tt.want
			before := fc.snapshot()
			_, _, err := fc.engine().Reconcile(context.Background(), spec, Status{})
			var inv *InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Reconcile error = %v (%T), want an InvalidError saying %q", err, err, tt.says)
			}
			if after := fc.snapshot(); after != before {
				t.Errorf("the refused start wrote to the cluster:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestResourcesRollback: a rollout of resources that fails its analysis resizes its pods back,
// and the template gets the resources it had back with its strategy and the pods their
// revision; a rollback of one that succeeded does the same.
func TestResourcesRollback(t *testing.T) {
	for _, tt := range []struct {
		name     string
		finished bool
	}{{"analysis fails", false}, {"after the rollout succeeded", true}} {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3, resources: burstable})
			oldRevision := fc.sts().Status.UpdateRevision
			e := fc.engine()
			spec := resourcesSpec(fc, resourcesOf("cpu=500m", "cpu=2"))
			var st Status
			if tt.finished {
				st = fc.mustDrive(e, spec, Status{}, nil)
				if st.Phase != PhaseSucceeded {
					t.Fatalf("status = %+v, want Succeeded", st)
				}
				fc.play()
				fc.assertResources(resourcesOf("cpu=500m", "cpu=2"))
				var err error
				if st, err = rollBack(fc, e, spec, st); err != nil || st.Phase != PhaseRollingBack {
					t.Fatalf("rollback = %+v, %v; want RollingBack", st, err)
				}
			} else {
				spec.Analysis = testAnalysis(t)
				fc.query.set(analysis.Fail)
			}
			st = fc.mustDrive(e, spec, st, nil)
			if st.Phase != PhaseRolledBack || st.RolledBack == 0 {
				t.Fatalf("status = %+v, want RolledBack", st)
			}
			if !strings.Contains(st.Message, "restored to its previous resources") {
				t.Errorf("message %q does not say the resources were restored", st.Message)
			}
			fc.play()
			fc.assertResources(burstable)
			sts := fc.sts()
			if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || sts.Status.UpdateRevision != oldRevision {
				t.Errorf("StatefulSet after the rollback: strategy %s, revision %s; want RollingUpdate and %s", sts.Spec.UpdateStrategy.Type, sts.Status.UpdateRevision, oldRevision)
			}
			for _, p := range fc.pods() {
				if rev := p.Labels[appsv1.ControllerRevisionHashLabelKey]; rev != oldRevision {
					t.Errorf("pod %s at revision %s after the rollback, want %s", p.Name, rev, oldRevision)
				}
			}
		})
	}
}

// TestResourcesSupersede: a rollout that supersedes one of images alone and changes resources
// too records, as previous, the resources the template had (the first rollout left them alone),
// so that a rollback puts back both the first images and those resources.
func TestResourcesSupersede(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3, resources: burstable})
	e := fc.engine()
	first := fc.spec(imageV2, one, all)
	fc.mustDrive(e, first, Status{}, func(st Status) bool { return st.Updated == 1 })

	second := fc.spec(imageV3, one, all)
	second.Resources = map[string]inplace.Resources{testApp: resourcesOf("cpu=500m", "")}
	second.Supersede = true
	st, _, err := e.Reconcile(context.Background(), second, Status{})
	if err != nil || st.Reason != ReasonSuperseded {
		t.Fatalf("superseding = %+v, %v; want Superseded", st, err)
	}
	if l := fc.lock(); l.PreviousImages[testApp] != imageV1 || !inplace.HasResources(l.PreviousResources[testApp], resourcesOf("cpu=250m", "")) ||
		len(l.PreviousResources[testApp].Limits) != 0 {
		t.Errorf("lock = %+v, want previous image %s and previous resources cpu 250m alone", l, imageV1)
	}
	fc.play()
	st = fc.mustDrive(e, second, st, nil)
	if st.Phase != PhaseSucceeded {
		t.Fatalf("status = %+v, want Succeeded", st)
	}
	fc.play()
	fc.assertOnImage(imageV3)
	fc.assertResources(resourcesOf("cpu=500m", ""))
	st = driveRollback(fc, e, second, st)
	if st.Phase != PhaseRolledBack {
		t.Fatalf("rollback = %+v, want RolledBack", st)
	}
	fc.play()
	fc.assertOnImage(imageV1)
	fc.assertResources(burstable)
}

// TestResourcesPlan: a plan of resources counts a pod that has them already, by quantity, as
// updated, and names the resources.
func TestResourcesPlan(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 3, resources: burstable})
	p := fc.pod("web-1")
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
	fc.updatePod(p)
	spec := resourcesSpec(fc, resourcesOf("cpu=0.5", ""))
	plan, err := fc.engine().Plan(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Already) != 1 || plan.Already[0] != "web-1" || len(plan.Images) != 0 || !inplace.HasResources(plan.Resources[testApp], resourcesOf("cpu=500m", "")) {
		t.Errorf("plan = %+v, want web-1 already there, no images, resources cpu 500m", plan)
	}
}

// TestResourcesStrayGoesBack: a pod the StatefulSet's controller created from the template with
// the new resources while the rollout held it is adopted by the rollback and resized back with
// the rest, as a pod on the new images is taken back to the previous ones.
func TestResourcesStrayGoesBack(t *testing.T) {
	fc := newFakeCluster(t, clusterOpts{pods: 2, resources: burstable})
	e := fc.engine()
	spec := resourcesSpec(fc, resourcesOf("cpu=500m", ""))
	st := fc.mustDrive(e, spec, Status{}, func(st Status) bool { return st.RolloutID != "" })
	fc.play()
	sts := fc.sts()
	sts.Spec.Replicas = ptr(int32(3))
	if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := runningPod("web-2", imageV1)
	p.Spec.Containers[0].Resources = *sts.Spec.Template.Spec.Containers[0].Resources.DeepCopy()
	p.Status.ContainerStatuses[0].Resources = sts.Spec.Template.Spec.Containers[0].Resources.DeepCopy()
	p.CreationTimestamp = metav1.NewTime(fc.now)
	p.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Status.UpdateRevision
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: testName, UID: "uid-sts-web", Controller: ptr(true)}}
	fc.createPod(p)
	st, err := rollBack(fc, e, spec, st)
	if err != nil {
		t.Fatal(err)
	}
	st = driveRollback(fc, e, spec, st)
	if st.Phase != PhaseRolledBack {
		t.Fatalf("rollback = %+v, want RolledBack", st)
	}
	fc.play()
	fc.assertResources(burstable)
	if s := fc.state(fc.pod("web-2")); s == nil || s.Stage != inplace.StageRolledBack {
		t.Errorf("web-2's state %+v, want it rolled back", s)
	}
}
