package rollout

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// applyManifest changes the StatefulSet as its owner's manifest says, as a GitOps tool applies
// it: OnDelete, the app container on image, the version label and the config checksum
// annotation on the template; the StatefulSet controller then computes the revision (play).
func applyManifest(fc *fakeCluster, image, version, checksum string) *appsv1.StatefulSet {
	fc.t.Helper()
	sts := fc.sts()
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	sts.Spec.Template.Spec.Containers[0].Image = image
	sts.Spec.Template.Labels["app.kubernetes.io/version"] = version
	sts.Spec.Template.Annotations = map[string]string{"checksum/config": checksum}
	sts, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{})
	if err != nil {
		fc.t.Fatal(err)
	}
	fc.play()
	return sts
}

// ownedSpec is the rollout of the owner's template on image, as a policy's driver asks for it:
// the revision label of that template and what it changed in the pods' labels and annotations.
func ownedSpec(fc *fakeCluster, image, version, checksum string) Spec {
	s := fc.spec(image, one, all)
	s.Holder = "policy:" + testNS + "/p"
	s.TemplateOwned = true
	s.Labels = map[string]string{appsv1.ControllerRevisionHashLabelKey: fc.sts().Status.UpdateRevision, "app.kubernetes.io/version": version}
	s.Annotations = map[string]string{"checksum/config": checksum}
	return s
}

// TestRolloutToTheOwnersTemplate: the pods of an OnDelete StatefulSet whose owner applied a new
// template are brought to it in place, with the template's revision label and the labels and
// annotations it changed; the StatefulSet's spec stays what its owner applied. A template whose
// image crashes rolls the pods back, labels and annotations too, and the spec still stays the
// owner's.
func TestRolloutToTheOwnersTemplate(t *testing.T) {
	t.Run("succeeds", func(t *testing.T) {
		fc := newFakeCluster(t, clusterOpts{pods: 3})
		applied := applyManifest(fc, imageV2, "2.0", "b2")
		spec := ownedSpec(fc, imageV2, "2.0", "b2")
		st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
		if st.Phase != PhaseSucceeded || st.Updated != 3 {
			t.Fatalf("status %+v, want Succeeded with 3 pods updated", st)
		}
		fc.assertOnImage(imageV2)
		for _, p := range fc.pods() {
			if p.Labels["app.kubernetes.io/version"] != "2.0" || p.Annotations["checksum/config"] != "b2" {
				t.Errorf("pod %s: labels %v, annotations %v; want version 2.0 and checksum b2", p.Name, p.Labels, p.Annotations)
			}
		}
		checkOwnersSpec(t, fc, applied)
		if lock := fc.lock(); !lock.TemplateOwned || lock.Phase != PhaseSucceeded {
			t.Errorf("lock %+v, want Succeeded, recording the owner's template", lock)
		}
	})
	t.Run("rolls back", func(t *testing.T) {
		fc := newFakeCluster(t, clusterOpts{pods: 3})
		before := fc.pods()
		applied := applyManifest(fc, imageCrash, "2.0", "b2")
		spec := ownedSpec(fc, imageCrash, "2.0", "b2")
		st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
		if st.Phase != PhaseRolledBack || !strings.Contains(st.Message, "keeps its template, which its owner wrote") {
			t.Fatalf("status %+v, want RolledBack, the template kept", st)
		}
		for i, p := range fc.pods() {
			if got, want := imageIDOf(p.Spec.Containers[0].Image), imageIDOf(imageV1); got != want {
				t.Errorf("pod %s runs %s after the rollback, want %s", p.Name, got, want)
			}
			if st := fc.state(&p); st != nil && st.Stage != inplace.StageRolledBack {
				t.Errorf("pod %s at stage %s, want %s or untouched", p.Name, st.Stage, inplace.StageRolledBack)
			}
			wantLabels := before[i].Labels
			gotAnnotations := maps.Clone(p.Annotations)
			delete(gotAnnotations, inplace.StateAnnotation)
			if !maps.Equal(p.Labels, wantLabels) || len(gotAnnotations) != 0 {
				t.Errorf("pod %s: labels %v, annotations %v; want the labels %v it had, and no other annotation", p.Name, p.Labels, gotAnnotations, wantLabels)
			}
		}
		checkOwnersSpec(t, fc, applied)
	})
}

// checkOwnersSpec fails the test unless the StatefulSet's spec is applied's.
func checkOwnersSpec(t *testing.T, fc *fakeCluster, applied *appsv1.StatefulSet) {
	t.Helper()
	if got := fc.sts(); !equality.Semantic.DeepEqual(got.Spec, applied.Spec) {
		t.Errorf("StatefulSet spec changed from its owner's:\n%s\nwant\n%s", mustJSON(got.Spec), mustJSON(applied.Spec))
	}
}

// TestRolloutToTheOwnersTemplateRefusals: what a rollout to the owner's template cannot do is
// refused, naming the reason, with nothing written.
func TestRolloutToTheOwnersTemplateRefusals(t *testing.T) {
	tests := []struct {
		name   string
		modify func(fc *fakeCluster, s *Spec)
		want   string
	}{
		{"a RollingUpdate strategy", func(fc *fakeCluster, _ *Spec) {
			sts := fc.sts()
			sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
			if _, err := fc.client.AppsV1().StatefulSets(testNS).Update(context.Background(), sts, metav1.UpdateOptions{}); err != nil {
				fc.t.Fatal(err)
			}
		}, "its updateStrategy is RollingUpdate; a rollout in place to its own template needs OnDelete"},
		{"images the template does not run", func(_ *fakeCluster, s *Spec) { s.Images = map[string]string{testApp: imageV3} },
			`its template runs {"app":"reg.example/app:v2"}, not {"app":"reg.example/app:v3"}`},
		{"a Deployment", func(_ *fakeCluster, s *Spec) { s.Target.Kind = workload.Deployment }, "drives a StatefulSet or a DaemonSet, not a Deployment"},
		{"digests always", func(_ *fakeCluster, s *Spec) { s.PinDigests = PinAlways }, "pin-digests always would put digests on pods"},
		{"our own annotation", func(_ *fakeCluster, s *Spec) { s.Annotations[inplace.StateAnnotation] = "{}" }, `annotation "inplace-rollout.io/state"`},
		{"a label value no pod can carry", func(_ *fakeCluster, s *Spec) { s.Labels["app.kubernetes.io/version"] = "2.0 beta" }, `label app.kubernetes.io/version="2.0 beta"`},
		{"labels on another rollout", func(_ *fakeCluster, s *Spec) { s.TemplateOwned = false }, "labels and annotations are set on pods only by a rollout to the workload's own template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 2})
			applyManifest(fc, imageV2, "2.0", "b2")
			spec := ownedSpec(fc, imageV2, "2.0", "b2")
			tt.modify(fc, &spec)
			before := fc.snapshot()
			_, _, err := fc.engine().Reconcile(context.Background(), spec, Status{})
			var inv *InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Reconcile = %v, want an InvalidError saying %q", err, tt.want)
			}
			if fc.snapshot() != before {
				t.Error("the cluster changed")
			}
		})
	}
}
