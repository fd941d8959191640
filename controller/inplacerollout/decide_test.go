package inplacerollout

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
)

// object is an InPlaceRollout of generation 2 whose status is about observed, in phase.
func object(observed int64, phase string, mods ...func(*v1alpha1.InPlaceRollout)) *v1alpha1.InPlaceRollout {
	obj := &v1alpha1.InPlaceRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 2, Annotations: map[string]string{}},
		Status:     v1alpha1.InPlaceRolloutStatus{ObservedGeneration: observed, Phase: phase},
	}
	for _, m := range mods {
		m(obj)
	}
	return obj
}

func held(o *v1alpha1.InPlaceRollout) { o.Finalizers = []string{"other", Finalizer} }
func deleting(o *v1alpha1.InPlaceRollout) {
	now := metav1.Now()
	o.DeletionTimestamp = &now
}
func templateChanged(o *v1alpha1.InPlaceRollout) { o.Status.Reason = "TemplateChanged" }
func abortAnnotated(o *v1alpha1.InPlaceRollout)  { o.Annotations[v1alpha1.AbortAnnotation] = "true" }

// TestDecide: what a reconcile does, from the object alone.
func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		obj    *v1alpha1.InPlaceRollout
		specOK bool
		want   decision
	}{
		{"a new object is held before anything starts", object(0, ""), true, decision{action: actAddFinalizer}},
		{"a held new object starts its rollout", object(0, "", held), true, decision{action: actRollout}},
		{"a rollout in flight goes on", object(2, "Progressing", held), true, decision{action: actRollout}},
		{"a paused rollout is looked at (a person may accept)", object(2, "Paused", held), true, decision{action: actRollout}},
		{"a rollout holding at upTo is looked at", object(2, "Holding", held), true, decision{action: actRollout}},
		{"a new spec over a succeeded one starts, held first", object(1, "Succeeded"), true, decision{action: actAddFinalizer}},
		{"a new spec over a rollout in flight supersedes it", object(1, "Progressing", held), true, decision{action: actRollout}},
		{"a succeeded rollout lets go of the object", object(2, "Succeeded", held), true, decision{action: actRemoveFinalizer}},
		{"a rolled-back rollout lets go of the object", object(2, "RolledBack", held), true, decision{action: actRemoveFinalizer}},
		{"an ended rollout let go: nothing to do", object(2, "Succeeded"), true, decision{action: actNone}},
		{"a rolled-back spec is not tried again", object(2, "RolledBack"), true, decision{action: actNone}},
		{"a wrong spec is said in the status", object(1, "Succeeded"), false, decision{action: actInvalid}},
		{"a wrong spec said once: nothing to do", object(2, "Failed"), false, decision{action: actNone}},
		{"a wrong spec mid-rollout is said, the finalizer kept until then", object(1, "Progressing", held), false, decision{action: actInvalid}},
		{"deleted in flight rolls back", object(2, "Progressing", held, deleting), true, decision{action: actRollback, why: stopDeleted}},
		{"deleted while paused rolls back", object(2, "Paused", held, deleting), true, decision{action: actRollback, why: stopDeleted}},
		{"deleted after a new spec rolls back the one in flight", object(1, "Progressing", held, deleting), true, decision{action: actRollback, why: stopDeleted}},
		{"deleted once rolled back lets go", object(2, "RolledBack", held, deleting), true, decision{action: actRemoveFinalizer}},
		{"deleted with a wrong spec lets go: no workload to roll back", object(2, "Progressing", held, deleting), false, decision{action: actRemoveFinalizer}},
		{"deleted and let go: nothing to do", object(2, "Progressing", deleting), true, decision{action: actNone}},
		{"aborted in flight rolls back", object(2, "Progressing", held, abortAnnotated), true, decision{action: actRollback, why: stopAborted}},
		{"aborted in flight after a new spec rolls back the one in flight", object(1, "Analyzing", held, abortAnnotated), true, decision{action: actRollback, why: stopAborted}},
		{"aborted with nothing in flight starts nothing", object(1, "Succeeded", abortAnnotated), true, decision{action: actNotStarted}},
		{"aborted before the first rollout starts nothing", object(0, "", abortAnnotated), true, decision{action: actNotStarted}},
		{"aborted and rolled back: nothing to do", object(2, "RolledBack", abortAnnotated), true, decision{action: actNone}},
		{"stopped on someone else's template change: held, looked at again", object(2, "Failed", held, templateChanged), true, decision{action: actRollout}},
		{"stopped on someone else's template change, aborted: rolls back", object(2, "Failed", held, templateChanged, abortAnnotated), true, decision{action: actRollback, why: stopAborted}},
		{"stopped on someone else's template change, deleted: rolls back", object(2, "Failed", held, templateChanged, deleting), true, decision{action: actRollback, why: stopDeleted}},
		{"a rollback that could not finish lets go", object(2, "Failed", held), true, decision{action: actRemoveFinalizer}},
		{"an abort annotation other than true is no abort", object(2, "Progressing", held, func(o *v1alpha1.InPlaceRollout) {
			o.Annotations[v1alpha1.AbortAnnotation] = "yes"
		}), true, decision{action: actRollout}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.obj, tt.specOK); got != tt.want {
				t.Errorf("decide = %v (why %d), want %v (why %d)", got.action, got.why, tt.want.action, tt.want.why)
			}
		})
	}
}
