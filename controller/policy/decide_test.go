package policy

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// podTemplate is a template of the app container on image, with labels.
func podTemplate(image string, labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
}

// observed is StatefulSet ns/web under policy p, OnDelete: its owner applied revision web-2
// (reg/app:v2, version label 2) and its two pods run web-1 (reg/app:v1, version 1).
func observed() *observation {
	current := workload.Revision{Name: "web-2", Hash: "web-2", Number: 2, Template: podTemplate("reg/app:v2", map[string]string{"app": "web", "app.kubernetes.io/version": "2"})}
	return &observation{
		ref:           workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"},
		policy:        &v1alpha1.InPlaceRolloutPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "p-uid"}},
		onDelete:      true,
		observed:      true,
		current:       current,
		currentLabels: map[string]string{"controller-revision-hash": "web-2"},
		template:      current.Template,
		podRevisions:  map[string]string{"web-0": "web-1", "web-1": "web-1"},
		revisions: workload.Revisions{
			"web-1": {Name: "web-1", Hash: "web-1", Number: 1, Template: podTemplate("reg/app:v1", map[string]string{"app": "web", "app.kubernetes.io/version": "1"})},
			"web-2": current,
		},
	}
}

// lockOf is a lock of the policy p's rollout (or of holder) in phase.
func lockOf(phase rollout.Phase, holder string) *rollout.Record {
	uid := "p-uid"
	if holder != "policy:ns/p" {
		uid = "other-uid"
	}
	return &rollout.Record{Holder: holder, HolderUID: types.UID(uid), RolloutID: "r1", Phase: phase, TemplateOwned: true}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		modify func(t *testing.T, o *observation)
		want   action
		// wantPhase and wantMsg are the entry's, for actRecord; wantWhy the rollback's.
		wantPhase, wantMsg, wantWhy string
		// check looks further at the decision.
		check func(t *testing.T, d decision)
	}{
		{name: "a new revision rolls out, its labels with its images", want: actStep, check: func(t *testing.T, d decision) {
			s := d.spec
			wantLabels := map[string]string{"controller-revision-hash": "web-2", "app.kubernetes.io/version": "2"}
			if !s.TemplateOwned || !s.Supersede || s.Images["app"] != "reg/app:v2" || !maps.Equal(s.Labels, wantLabels) || s.Holder != "policy:ns/p" || s.HolderUID != "p-uid" {
				t.Errorf("spec %+v; want the owner's template, images app=reg/app:v2, labels %v, holder policy:ns/p", s, wantLabels)
			}
			if d.entry.Revision != "web-2" || d.entry.Kind != "StatefulSet" || d.entry.Name != "web" {
				t.Errorf("entry %+v, want StatefulSet web at revision web-2", d.entry)
			}
		}},
		{name: "every pod at the revision is recorded once", modify: func(t *testing.T, o *observation) {
			o.podRevisions = map[string]string{"web-0": "web-2", "web-1": "web-2"}
		}, want: actRecord, wantPhase: "Succeeded", wantMsg: "every pod of StatefulSet ns/web runs revision web-2"},
		{name: "every pod at the revision, recorded", modify: func(t *testing.T, o *observation) {
			o.podRevisions = map[string]string{"web-0": "web-2", "web-1": "web-2"}
			o.entry = v1alpha1.PolicyWorkloadStatus{Kind: "StatefulSet", Name: "web", Revision: "web-2", Phase: "Succeeded"}
		}, want: actNone},
		{name: "a revision that rolled back is not tried again", modify: func(t *testing.T, o *observation) {
			o.entry = v1alpha1.PolicyWorkloadStatus{Kind: "StatefulSet", Name: "web", Revision: "web-2", Phase: "RolledBack", FailedRevision: "web-2"}
			o.lock = lockOf(rollout.PhaseRolledBack, "policy:ns/p")
		}, want: actNone},
		{name: "a rollback the status missed is remembered from the lock", modify: func(t *testing.T, o *observation) {
			lock := lockOf(rollout.PhaseRolledBack, "policy:ns/p")
			lock.SpecHash = specHash(t, o)
			lock.Message = "pod web-1 crash-loops"
			o.lock = lock
		}, want: actRecord, wantPhase: "RolledBack", wantMsg: "rollout r1 of revision web-2 rolled back: pod web-1 crash-loops", check: func(t *testing.T, d decision) {
			if d.entry.FailedRevision != "web-2" {
				t.Errorf("failed revision %q, want web-2", d.entry.FailedRevision)
			}
		}},
		{name: "a revision that changes the env is not in place", modify: func(t *testing.T, o *observation) {
			o.template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
			o.current.Template = o.template
		}, want: actRecord, wantPhase: PhaseNotInPlace, wantMsg: "template.spec.containers[0].env differs"},
		{name: "a pod at a revision no ControllerRevision records", modify: func(t *testing.T, o *observation) {
			o.podRevisions["web-0"] = "web-0"
		}, want: actRecord, wantPhase: PhaseNotInPlace, wantMsg: `pod web-0 runs revision "web-0" of StatefulSet ns/web, which no ControllerRevision records any longer`},
		{name: "not OnDelete", modify: func(t *testing.T, o *observation) { o.onDelete = false },
			want: actRecord, wantPhase: PhaseNotOnDelete, wantMsg: "say updateStrategy OnDelete in its manifest"},
		{name: "not OnDelete any longer, its rollout in flight", modify: func(t *testing.T, o *observation) {
			o.onDelete = false
			o.lock = lockOf(rollout.PhaseProgressing, "policy:ns/p")
		}, want: actRollBack, wantWhy: "no longer says updateStrategy OnDelete"},
		{name: "another holder's rollout", modify: func(t *testing.T, o *observation) { o.lock = lockOf(rollout.PhaseProgressing, "cli") },
			want: actRecord, wantPhase: PhaseWaiting, wantMsg: "held by rollout r1 of cli", check: func(t *testing.T, d decision) {
				if d.requeue != waitRequeue {
					t.Errorf("requeue %s, want %s", d.requeue, waitRequeue)
				}
			}},
		{name: "no policy of that name", modify: func(t *testing.T, o *observation) { o.policy = nil }, want: actNone},
		{name: "no policy of that name, its rollout in flight", modify: func(t *testing.T, o *observation) {
			o.policy = nil
			o.lock = lockOf(rollout.PhaseProgressing, "policy:ns/p")
		}, want: actRollBack, wantWhy: "no longer names the policy of rollout r1 (policy:ns/p)"},
		{name: "another policy named, the first's rollout in flight", modify: func(t *testing.T, o *observation) {
			o.lock = lockOf(rollout.PhaseProgressing, "policy:ns/old")
		}, want: actRollBack, wantWhy: "(policy:ns/old)"},
		{name: "the revision not recorded yet", modify: func(t *testing.T, o *observation) { o.observed = false }, want: actNone, check: func(t *testing.T, d decision) {
			if d.requeue != revisionRequeue {
				t.Errorf("requeue %s, want %s", d.requeue, revisionRequeue)
			}
		}},
		{name: "labels alone", modify: func(t *testing.T, o *observation) {
			o.template.Spec.Containers[0].Image = "reg/app:v1"
			o.current.Template = o.template
		}, want: actStep, check: func(t *testing.T, d decision) {
			if d.spec.Images["app"] != "reg/app:v1" || d.spec.Labels["app.kubernetes.io/version"] != "2" {
				t.Errorf("spec images %v labels %v; want the image the pods run and the new version label", d.spec.Images, d.spec.Labels)
			}
		}},
		{name: "a policy the engine refuses", modify: func(t *testing.T, o *observation) {
			o.policy.Spec.Batches = []intstr.IntOrString{intstr.FromString("50%"), intstr.FromString("10%")}
		}, want: actRecord, wantPhase: "Failed", wantMsg: "policy p: "},
		{name: "its rollback goes on whatever the template says", modify: func(t *testing.T, o *observation) {
			o.lock = lockOf(rollout.PhaseRollingBack, "policy:ns/p")
			o.template.Spec.Containers[0].Image = "reg/app:v3"
			o.current.Template = o.template
		}, want: actRollBack, check: func(t *testing.T, d decision) {
			if d.why != "" || d.rollback.Holder != "policy:ns/p" {
				t.Errorf("rollback %+v because %q; want the policy's, going on", d.rollback, d.why)
			}
		}},
		{name: "its rollout in flight to the revision goes on as its lock says, whichever pods are behind", modify: func(t *testing.T, o *observation) {
			lock := lockOf(rollout.PhaseProgressing, "policy:ns/p")
			lock.Images = map[string]string{"app": "reg/app:v2"}
			lock.Labels = map[string]string{"controller-revision-hash": "web-2", "app.kubernetes.io/version": "2", "team": "a"}
			lock.Annotations = map[string]string{"checksum/config": "b"}
			o.lock = lock
			o.podRevisions = map[string]string{"web-0": "web-2", "web-1": "web-2"}
		}, want: actStep, check: func(t *testing.T, d decision) {
			if d.spec.Labels["team"] != "a" || d.spec.Annotations["checksum/config"] != "b" || d.spec.Images["app"] != "reg/app:v2" {
				t.Errorf("spec %+v; want the lock's images, labels and annotations", d.spec)
			}
		}},
		{name: "a policy that would pause", modify: func(t *testing.T, o *observation) { o.policy.Spec.OnInconclusive = "pause" },
			want: actRecord, wantPhase: "Failed", wantMsg: "spec.onInconclusive: pause waits for a person"},
		{name: "its rollout in flight, a new revision not in place", modify: func(t *testing.T, o *observation) {
			o.lock = lockOf(rollout.PhaseProgressing, "policy:ns/p")
			o.template.Spec.Containers[0].Command = []string{"serve"}
			o.current.Template = o.template
		}, want: actRollBack, wantWhy: "cannot be rolled out in place"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := observed()
			if tt.modify != nil {
				tt.modify(t, o)
			}
			d := decide(o)
			if d.action != tt.want {
				t.Fatalf("action %v (%+v), want %v", d.action, d, tt.want)
			}
			if tt.want == actRecord && (d.entry.Phase != tt.wantPhase || !strings.Contains(d.entry.Message, tt.wantMsg)) {
				t.Errorf("entry %s %q, want %s saying %q", d.entry.Phase, d.entry.Message, tt.wantPhase, tt.wantMsg)
			}
			if tt.want == actRollBack && !strings.Contains(d.why, tt.wantWhy) {
				t.Errorf("rollback because %q, want %q", d.why, tt.wantWhy)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

// specHash is the hash of the spec decide steps for o.
func specHash(t *testing.T, o *observation) string {
	t.Helper()
	d := decide(o)
	if d.action != actStep {
		t.Fatalf("decide = %v, want a step", d.action)
	}
	return d.spec.Hash()
}
