package inplacerollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
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
func pausedOn(batch int32) func(*v1alpha1.InPlaceRollout) {
	return func(o *v1alpha1.InPlaceRollout) {
		o.Status.Analysis = &v1alpha1.AnalysisVerdict{Batch: batch, Pods: 2, Verdict: "Inconclusive"}
	}
}
func accepting(v string) func(*v1alpha1.InPlaceRollout) {
	return func(o *v1alpha1.InPlaceRollout) { o.Annotations[v1alpha1.AcceptBatchAnnotation] = v }
}
func templateChanged(o *v1alpha1.InPlaceRollout) { o.Status.Reason = "TemplateChanged" }
func abortAnnotated(o *v1alpha1.InPlaceRollout)  { o.Annotations[v1alpha1.AbortAnnotation] = "true" }

// TestDecide: what a reconcile does, from the object alone.
func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		obj      *v1alpha1.InPlaceRollout
		specOK   bool
		targetOK bool
		want     decision
	}{
		{"a new object is held before anything starts", object(0, ""), true, true, decision{action: actAddFinalizer}},
		{"a held new object starts its rollout", object(0, "", held), true, true, decision{action: actRollout}},
		{"a rollout in flight goes on", object(2, "Progressing", held), true, true, decision{action: actRollout}},
		{"a paused rollout is looked at (a person may accept)", object(2, "Paused", held), true, true, decision{action: actRollout}},
		{"a rollout holding at upTo is looked at", object(2, "Holding", held), true, true, decision{action: actRollout}},
		{"a new spec over a succeeded one starts, held first", object(1, "Succeeded"), true, true, decision{action: actAddFinalizer}},
		{"a new spec over a rollout in flight supersedes it", object(1, "Progressing", held), true, true, decision{action: actRollout}},
		{"a new spec over a stopped one starts", object(1, "Failed", held), true, true, decision{action: actRollout}},
		{"a succeeded rollout lets go of the object", object(2, "Succeeded", held), true, true, decision{action: actRemoveFinalizer}},
		{"a rolled-back rollout lets go of the object", object(2, "RolledBack", held), true, true, decision{action: actRemoveFinalizer}},
		{"an ended rollout let go: nothing to do", object(2, "Succeeded"), true, true, decision{action: actNone}},
		{"a rolled-back spec is not tried again", object(2, "RolledBack"), true, true, decision{action: actNone}},
		{"a wrong spec is said in the status, not held for it", object(1, "Succeeded"), false, true, decision{action: actInvalid}},
		{"a wrong new object is said in the status, not held for it", object(0, ""), false, false, decision{action: actInvalid}},
		{"a wrong spec said once: nothing to do", object(2, "Failed"), false, true, decision{action: actNone}},
		{"a wrong spec mid-rollout is said", object(1, "Progressing", held), false, true, decision{action: actInvalid}},
		{"a wrong spec said mid-rollout keeps the finalizer: the old rollout holds the workload", object(2, "Failed", held), false, true, decision{action: actNone}},
		{"stopped for a person (refused, blocked, a rollback incomplete): held, nothing done", object(2, "Failed", held), true, true, decision{action: actNone}},
		{"deleted in flight rolls back", object(2, "Progressing", held, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted while paused rolls back", object(2, "Paused", held, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted after a new spec rolls back the one in flight", object(1, "Progressing", held, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted after a new spec not yet seen: the lock decides", object(1, "Succeeded", held, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted once rolled back lets go", object(2, "RolledBack", held, deleting), true, true, decision{action: actRemoveFinalizer}},
		{"deleted once stopped for a person rolls back", object(2, "Failed", held, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted with a wrong spec rolls its target back", object(2, "Failed", held, deleting), false, true, decision{action: actRollback, why: stopDeleted}},
		{"deleted with a target that names no workload lets go: nothing started", object(2, "Failed", held, deleting), false, false, decision{action: actRemoveFinalizer}},
		{"deleted and let go: nothing to do", object(2, "Progressing", deleting), true, true, decision{action: actNone}},
		{"aborted in flight rolls back", object(2, "Progressing", held, abortAnnotated), true, true, decision{action: actRollback, why: stopAborted}},
		{"aborted in flight after a new spec rolls back the one in flight", object(1, "Analyzing", held, abortAnnotated), true, true, decision{action: actRollback, why: stopAborted}},
		{"aborted when stopped for a person rolls back", object(2, "Failed", held, abortAnnotated), true, true, decision{action: actRollback, why: stopAborted}},
		{"aborted with a wrong spec rolls its target back", object(2, "Failed", held, abortAnnotated), false, true, decision{action: actRollback, why: stopAborted}},
		{"aborted with nothing in flight starts nothing", object(1, "Succeeded", abortAnnotated), true, true, decision{action: actNotStarted}},
		{"aborted before the first rollout starts nothing", object(0, "", abortAnnotated), true, true, decision{action: actNotStarted}},
		{"aborted and rolled back: nothing to do", object(2, "RolledBack", abortAnnotated), true, true, decision{action: actNone}},
		{"stopped on someone else's template change: held, looked at again", object(2, "Failed", held, templateChanged), true, true, decision{action: actRollout}},
		{"stopped on someone else's template change, aborted: rolls back", object(2, "Failed", held, templateChanged, abortAnnotated), true, true, decision{action: actRollback, why: stopAborted}},
		{"stopped on someone else's template change, deleted: rolls back", object(2, "Failed", held, templateChanged, deleting), true, true, decision{action: actRollback, why: stopDeleted}},
		{"an abort annotation other than true is no abort", object(2, "Progressing", held, func(o *v1alpha1.InPlaceRollout) {
			o.Annotations[v1alpha1.AbortAnnotation] = "yes"
		}), true, true, decision{action: actRollout}},
		{"an accept of the paused batch: the rollout step accepts it", object(2, "Paused", held, pausedOn(2), accepting("2")), true, true, decision{action: actRollout}},
		{"an accept of another batch goes", object(2, "Paused", held, pausedOn(2), accepting("1")), true, true, decision{action: actClearAccept}},
		{"an accept acted on goes, so it never accepts a later pause", object(2, "Progressing", held, accepting("2")), true, true, decision{action: actClearAccept}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.obj, tt.specOK, tt.targetOK); got != tt.want {
				t.Errorf("decide = %v (why %d), want %v (why %d)", got.action, got.why, tt.want.action, tt.want.why)
			}
		})
	}
}

// TestRollbackSpec: a deleted or aborted object rolls back at its spec's pace, or, with a wrong
// spec, at the defaults' on its target; a target that names no workload has nothing to roll back.
func TestRollbackSpec(t *testing.T) {
	withTarget := func(kind, name, selector string) *v1alpha1.InPlaceRollout {
		o := object(2, "Failed")
		o.UID = "u-1"
		o.Spec.Target = v1alpha1.Target{Kind: kind, Name: name, Selector: selector}
		return o
	}
	spec := rollout.Spec{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "web"}, Holder: "inplacerollout:shop/web",
		MaxUnavailable: intstr.FromString("50%"), Timeout: time.Minute}
	if rb, ok := rollbackSpec(withTarget("StatefulSet", "web", ""), spec, true); !ok || rb.MaxUnavailable != spec.MaxUnavailable || rb.Timeout != time.Minute {
		t.Errorf("with a good spec: %+v %v, want the spec's pace", rb, ok)
	}
	tests := []struct {
		name string
		obj  *v1alpha1.InPlaceRollout
		ok   bool
	}{
		{"a StatefulSet", withTarget("StatefulSet", "web", ""), true},
		{"label-selected pods", withTarget("Pods", "", "app=web"), true},
		{"an unknown kind", withTarget("CronJob", "web", ""), false},
		{"a StatefulSet without a name", withTarget("StatefulSet", "", ""), false},
		{"pods with a name", withTarget("Pods", "web", "app=web"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rb, ok := rollbackSpec(tt.obj, rollout.Spec{}, false)
			if ok != tt.ok {
				t.Fatalf("rollbackSpec ok = %v, want %v", ok, tt.ok)
			}
			if ok && (rb.Holder != Holder(tt.obj) || rb.HolderUID != "u-1" || rb.MaxUnavailable != intstr.FromInt32(1) ||
				rb.Timeout != v1alpha1.DefaultTimeout || rb.Target.Namespace != "shop") {
				t.Errorf("rollbackSpec = %+v, want the object's holder, one pod at a time, the default deadline, in its namespace", rb)
			}
		})
	}
}
