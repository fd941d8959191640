package inplacerollout

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Resource is the InPlaceRollout objects' resource.
var Resource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "inplacerollouts"}

// Pacing of an object while nothing on the cluster says when to look again.
const (
	// pausedRequeue is how often a paused rollout is looked at: a person may accept its batch.
	pausedRequeue = 30 * time.Second
	// minRequeue keeps a step that asks to be called again at once from spinning.
	minRequeue = 200 * time.Millisecond
)

// Reconciler takes one step of one InPlaceRollout object: it decides from the object alone what
// to do (decide), does it (one write of the object, or one step of the engine and one status
// write), each write carrying the resourceVersion it observed.
type Reconciler struct {
	Engine *rollout.Engine
	// Client writes the objects (finalizers, status).
	Client dynamic.Interface
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reconcile takes the next step of the object u and writes what changed. It returns when to look
// again (0: when the object changes). A returned error is worth a retry; the object's status
// already says what is wrong when it is not.
func (r *Reconciler) Reconcile(ctx context.Context, u *unstructured.Unstructured) (time.Duration, error) {
	obj, err := fromUnstructured(u)
	if err != nil {
		// The API server validated the object against the CRD's schema: this is not one.
		r.log().Warn("not an InPlaceRollout", "inplacerollout", u.GetNamespace()+"/"+u.GetName(), "err", err.Error())
		return 0, nil
	}
	if template(obj) && !slices.Contains(obj.Finalizers, Finalizer) && obj.Status.Phase == "" {
		// A spec for CustomRuns; one annotated so after its rollout began is finished as usual.
		return 0, nil
	}
	spec, specErr := rollout.FromV1alpha1(&obj.Spec, rollout.Caller{Namespace: obj.Namespace, Holder: Holder(obj), HolderUID: obj.UID})
	spec.Supersede = true
	rb, targetOK := rollbackSpec(obj, spec, specErr == nil)
	d := decide(obj, specErr == nil, targetOK)
	switch d.action {
	case actNone:
		return 0, nil
	case actAddFinalizer, actRemoveFinalizer:
		return 0, r.setFinalizer(ctx, u, d.action == actAddFinalizer)
	case actClearAccept:
		return 0, r.clearAccept(ctx, u)
	}
	// A second decoding of u: a copy of obj that the step changes.
	next, err := fromUnstructured(u)
	if err != nil {
		return 0, nil
	}
	var requeue time.Duration
	var stepErr error
	switch d.action {
	case actNotStarted:
		setStatus(next, rollout.Status{Phase: rollout.PhaseRolledBack}, string(rollout.ReasonRollbackRequested),
			fmt.Sprintf("not started: annotation %s is set; remove it and change the spec to roll out again", v1alpha1.AbortAnnotation), r.now())
	case actInvalid:
		msg := fmt.Sprintf("%s %s/%s: %v; nothing was changed", v1alpha1.Kind, obj.Namespace, obj.Name, specErr)
		if inFlight(obj) && obj.Status.RolloutID != "" {
			msg += fmt.Sprintf("; the rollout of the previous spec (%s) stays where it is, its workload held: fix the spec, and the fixed spec's rollout replaces it", obj.Status.RolloutID)
		}
		setFailed(next, ReasonInvalidSpec, msg, r.now())
	case actRollout:
		requeue, stepErr = r.stepRollout(ctx, next, spec)
	case actRollback:
		requeue, stepErr = r.stepRollback(ctx, next, rb, d.why)
	}
	if stepErr != nil {
		stepErr = &rollout.StepError{Target: rb.Target, RolloutID: next.Status.RolloutID, Err: stepErr}
	}
	if equality.Semantic.DeepEqual(next.Status, obj.Status) {
		return requeue, stepErr
	}
	if err := r.writeStatus(ctx, u, next); err != nil {
		return 0, err
	}
	r.logOutcome(obj, next, rb.Target)
	return requeue, stepErr
}

// rollbackSpec is how obj's rollout rolls back when the object is deleted or aborted: at the
// spec's pace, or, when the spec is wrong, at the defaults' (one pod at a time, the default
// progress deadline) on its target, which cannot change (the CRD's rule). ok is false when the
// target names no workload: no rollout of the object can have started.
func rollbackSpec(obj *v1alpha1.InPlaceRollout, spec rollout.Spec, specOK bool) (rollout.RollbackSpec, bool) {
	if specOK {
		return spec.Rollback(), true
	}
	t := obj.Spec.Target
	kind, err := workload.ParseKind(t.Kind)
	ref := workload.Ref{Kind: kind, Namespace: obj.Namespace, Name: t.Name, Selector: t.Selector}
	if err != nil || (kind == workload.Pods) != (t.Selector != "") || (kind == workload.Pods) == (t.Name != "") {
		return rollout.RollbackSpec{Target: ref}, false
	}
	return rollout.RollbackSpec{Target: ref, Holder: Holder(obj), HolderUID: obj.UID, MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}, true
}

// stepRollout takes the next step of obj's rollout, accepting its paused batch first when the
// accept annotation names it.
func (r *Reconciler) stepRollout(ctx context.Context, obj *v1alpha1.InPlaceRollout, spec rollout.Spec) (time.Duration, error) {
	if p, ok := pauseOf(obj); ok && obj.Annotations[v1alpha1.AcceptBatchAnnotation] == strconv.Itoa(p.Batch) {
		st, err := r.Engine.Accept(context.WithoutCancel(ctx), spec.Target, spec.Holder, p)
		switch o := rollout.OutcomeOf(st, err); {
		case o.Kind == rollout.BadInput:
			// The pause is over (accepted, or the rollout moved on): the step below sees where.
		case o.Err != nil:
			return 0, fmt.Errorf("accepting batch %d of %s for %s %s/%s: %w", p.Batch, spec.Target, v1alpha1.Kind, obj.Namespace, obj.Name, err)
		default:
			r.objLog(obj, spec.Target).Info("batch accepted", "batch", p.Batch)
			setStatus(obj, st, string(st.Reason), fmt.Sprintf("batch %d accepted by annotation %s; %s", p.Batch, v1alpha1.AcceptBatchAnnotation, rollout.Summary(st)), r.now())
			return minRequeue, nil
		}
	}
	st, requeue, err := r.Engine.Reconcile(context.WithoutCancel(ctx), spec, prevStatus(obj))
	if err != nil {
		return r.engineError(obj, st, err)
	}
	return r.settle(obj, spec, st, requeue), nil
}

// settle sets obj's status from the rollout's, with the remedy where a person is needed, and says
// when to look again.
func (r *Reconciler) settle(obj *v1alpha1.InPlaceRollout, spec rollout.Spec, st rollout.Status, after time.Duration) time.Duration {
	reason := string(st.Reason)
	switch rollout.OutcomeOf(st, nil).Kind {
	case rollout.Succeeded, rollout.RolledBack:
		setStatus(obj, st, reason, rollout.OutcomeMessage(st), r.now())
		return 0
	case rollout.NeedsPerson:
		msg := rollout.OutcomeMessage(st)
		if st.Reason == rollout.ReasonTemplateChanged {
			msg += fmt.Sprintf("; %s stays held: to roll it back, annotate %s %s/%s %s=true; to go on, put the rollout's images back in its template",
				spec.Target, v1alpha1.Kind, obj.Namespace, obj.Name, v1alpha1.AbortAnnotation)
		}
		if reason == "" {
			reason = ReasonRollbackIncomplete
		}
		setStatus(obj, st, reason, msg, r.now())
		if st.Reason == rollout.ReasonTemplateChanged {
			// Held, waiting for the template or an abort; either changes an object the
			// controller watches only in part (the workload), so it looks again now and then.
			return pausedRequeue
		}
		return 0
	case rollout.Holding:
		setStatus(obj, st, reason, rollout.Summary(st)+"; to go on, raise or remove spec.upTo", r.now())
		return 0
	case rollout.Paused:
		batch := st.Batch
		if st.Analysis != nil {
			batch = st.Analysis.Batch
		}
		setStatus(obj, st, reason, fmt.Sprintf("%s; to go on, annotate %s %s/%s %s=%d; to roll back, annotate it %s=true",
			rollout.Summary(st), v1alpha1.Kind, obj.Namespace, obj.Name, v1alpha1.AcceptBatchAnnotation, batch, v1alpha1.AbortAnnotation), r.now())
		return pausedRequeue
	}
	setStatus(obj, st, reason, rollout.Summary(st), r.now())
	return max(after, minRequeue)
}

// stepRollback takes the next step of the rollback rb of obj's rollout, which was deleted or
// aborted.
func (r *Reconciler) stepRollback(ctx context.Context, obj *v1alpha1.InPlaceRollout, rb rollout.RollbackSpec, why stopReason) (time.Duration, error) {
	reason, asked := string(rollout.ReasonRollbackRequested), fmt.Sprintf("aborted by annotation %s", v1alpha1.AbortAnnotation)
	if why == stopDeleted {
		reason, asked = ReasonDeleted, "deleted"
	}
	st, requeue, err := r.Engine.Abort(context.WithoutCancel(ctx), rb, prevStatus(obj))
	o := rollout.OutcomeOf(st, err)
	switch o.Kind {
	case rollout.BadInput:
		// Nothing of this object's holds the workload: its rollout never started, or ended and
		// was let go, or someone else's rollout holds it.
		setStatus(obj, rollout.Status{Phase: rollout.PhaseRolledBack, RolloutID: obj.Status.RolloutID}, reason,
			fmt.Sprintf("%s; nothing to roll back: %s; remove the annotation and change the spec to roll out again", asked, o.Problem+o.Fix.Choice()), r.now())
		return 0, nil
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		return 0, fmt.Errorf("rolling back %s for %s %s/%s (%s): %w", rb.Target, v1alpha1.Kind, obj.Namespace, obj.Name, asked, err)
	case rollout.Refused, rollout.Blocked, rollout.Superseded:
		setFailed(obj, ReasonRollbackIncomplete, fmt.Sprintf("%s; the rollback of %s is incomplete, a person must look: %v", asked, rb.Target, err), r.now())
		return 0, nil
	case rollout.RolledBack:
		setStatus(obj, st, reason, fmt.Sprintf("%s; the rollout of %s was rolled back (%s)", asked, rb.Target, rollout.OutcomeMessage(st)), r.now())
		return 0, nil
	case rollout.NeedsPerson:
		setStatus(obj, st, ReasonRollbackIncomplete, fmt.Sprintf("%s; the rollback of %s is incomplete, a person must look: %s", asked, rb.Target, rollout.OutcomeMessage(st)), r.now())
		return 0, nil
	}
	setStatus(obj, st, reason, fmt.Sprintf("%s; %s", asked, rollout.Summary(st)), r.now())
	return max(requeue, minRequeue), nil
}

// engineError records what an engine error means for obj: bad input, an API error no retry
// fixes, something blocked for a person, or a superseded rollout end it; any other error is worth
// a retry and is returned.
func (r *Reconciler) engineError(obj *v1alpha1.InPlaceRollout, st rollout.Status, err error) (time.Duration, error) {
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.BadInput:
		setFailed(obj, ReasonRefused, fmt.Sprintf("%v; nothing was changed; change the spec to try again", err), r.now())
	case rollout.Refused:
		setFailed(obj, ReasonAPIError, err.Error(), r.now())
	case rollout.Blocked:
		setFailed(obj, reasonOr(st.Reason, "Blocked"), err.Error(), r.now())
	case rollout.Superseded:
		// Only this object's own rollouts are superseded by its holder: its status was about a
		// rollout its newer spec replaced. The next step reads the lock afresh.
		obj.Status.RolloutID = ""
		return minRequeue, nil
	default:
		return 0, fmt.Errorf("%s %s/%s: %w", v1alpha1.Kind, obj.Namespace, obj.Name, err)
	}
	return 0, nil
}

// setFinalizer adds or removes Finalizer on u, with one update carrying the resourceVersion read.
func (r *Reconciler) setFinalizer(ctx context.Context, u *unstructured.Unstructured, hold bool) error {
	next := u.DeepCopy()
	finalizers := slices.DeleteFunc(next.GetFinalizers(), func(f string) bool { return f == Finalizer })
	if hold {
		finalizers = append(finalizers, Finalizer)
	}
	next.SetFinalizers(finalizers)
	if _, err := r.Client.Resource(Resource).Namespace(u.GetNamespace()).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s finalizer %s of %s %s/%s: %w", map[bool]string{true: "adding", false: "removing"}[hold], Finalizer, v1alpha1.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// clearAccept removes the accept annotation from u, with one update carrying the
// resourceVersion read.
func (r *Reconciler) clearAccept(ctx context.Context, u *unstructured.Unstructured) error {
	next := u.DeepCopy()
	annotations := next.GetAnnotations()
	delete(annotations, v1alpha1.AcceptBatchAnnotation)
	next.SetAnnotations(annotations)
	if _, err := r.Client.Resource(Resource).Namespace(u.GetNamespace()).Update(ctx, next, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing annotation %s, which names no paused batch, from %s %s/%s: %w", v1alpha1.AcceptBatchAnnotation, v1alpha1.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// writeStatus writes next's status to the object u, with u's resourceVersion: a conflict means
// the object changed since it was read, and the next reconcile decides again from what it is now.
func (r *Reconciler) writeStatus(ctx context.Context, u *unstructured.Unstructured, next *v1alpha1.InPlaceRollout) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next.Status)
	if err != nil {
		return fmt.Errorf("encoding the status of %s %s/%s: %w", v1alpha1.Kind, u.GetNamespace(), u.GetName(), err)
	}
	w := u.DeepCopy()
	w.Object["status"] = status
	if _, err := r.Client.Resource(Resource).Namespace(u.GetNamespace()).UpdateStatus(ctx, w, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of %s %s/%s: %w", v1alpha1.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// fromUnstructured is u as an InPlaceRollout.
func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.InPlaceRollout, error) {
	var obj v1alpha1.InPlaceRollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", v1alpha1.Kind, u.GetNamespace(), u.GetName(), err)
	}
	return &obj, nil
}

func reasonOr(r rollout.Reason, fallback string) string {
	if r != "" {
		return string(r)
	}
	return fallback
}

func (r *Reconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// objLog is the log of obj's rollout of target: each line names the object, the workload and,
// when known, the rollout.
func (r *Reconciler) objLog(obj *v1alpha1.InPlaceRollout, target rollout.Ref) *slog.Logger {
	l := r.log().With("inplacerollout", obj.Namespace+"/"+obj.Name)
	if target.Kind != "" {
		l = l.With(rollout.LogAttrs(target)...)
	}
	if obj.Status.RolloutID != "" {
		l = l.With("rolloutID", obj.Status.RolloutID)
	}
	return l
}

// logOutcome logs the object's phase when it changed.
func (r *Reconciler) logOutcome(before, after *v1alpha1.InPlaceRollout, target rollout.Ref) {
	b, a := before.Status, after.Status
	if b.Phase == a.Phase && b.Reason == a.Reason && b.ObservedGeneration == a.ObservedGeneration {
		return
	}
	r.objLog(after, target).Info("inplacerollout", "phase", a.Phase, "reason", a.Reason, "generation", after.Generation, "message", a.Message)
}
