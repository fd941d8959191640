package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Resource is the InPlaceRolloutPolicy objects' resource.
var Resource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "inplacerolloutpolicies"}

// minRequeue keeps a step that asks to be called again at once from spinning.
const minRequeue = 200 * time.Millisecond

// target is a workload that names a policy, as the controller's cache holds it.
type target struct {
	ref workload.Ref
	// policy is the name its annotation gives; empty when it names none any longer.
	policy string
}

// Reconciler takes one step for one workload under a policy: it observes the workload, its
// revisions and pods, its lock and the policy (observe), decides from them alone (decide), and
// does it: one engine step, or one write of the policy's status, each carrying the
// resourceVersion it observed.
type Reconciler struct {
	Engine *rollout.Engine
	// Kube reads the workloads and their revisions.
	Kube kubernetes.Interface
	// Policies writes the policies' status.
	Policies dynamic.Interface
	// Policy reads the policy namespace/name from the controller's cache; false when there is
	// none.
	Policy func(namespace, name string) (*unstructured.Unstructured, bool)
	// PoliciesIn reads the policies of a namespace from the controller's cache.
	PoliciesIn func(namespace string) []*unstructured.Unstructured
	// Log receives one line per event; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reconcile takes the next step for t and returns when to look again (0: when an object
// changes). A returned error is worth a retry; the policy's status says what is wrong when it
// is not.
func (r *Reconciler) Reconcile(ctx context.Context, t target) (time.Duration, error) {
	o, u, err := r.observe(ctx, t)
	var inv *workload.InvalidError
	switch {
	case apierrors.IsNotFound(err), errors.As(err, &inv):
		// The workload is gone: so is what a rollout could do to it, and its entry in the
		// status of the policy it named.
		return r.dropStale(ctx, t.ref, "")
	case err != nil:
		return 0, err
	}
	d := decide(o)
	log := r.log().With(append(rollout.LogAttrs(t.ref), "policy", t.policy)...)
	if d.entry.Kind == "" {
		// Not an entry of the policy the workload names (a rollout of another's taken back).
		u = nil
	}
	var (
		st      rollout.Status
		requeue time.Duration
		note    string
	)
	switch d.action {
	case actNone:
		if requeue, err := r.dropStale(ctx, t.ref, t.policy); err != nil || requeue > 0 {
			return requeue, err
		}
		return d.requeue, nil
	case actRecord:
		if err := r.writeEntry(ctx, u, d.entry); err != nil {
			return 0, err
		}
		log.Info("policy status", "workloadStatus", describe(d.entry), "message", d.entry.Message)
		if u != nil && notApplied(d.entry.Phase) {
			r.warn(ctx, o.object, t.policy, d.entry, log)
		}
		return d.requeue, nil
	case actRollBack:
		if d.why != "" {
			log.Warn("rolling back the rollout of a policy", "why", d.why)
			note = "rolling back: " + d.why
		}
		st, requeue, err = r.Engine.Abort(context.WithoutCancel(ctx), d.rollback, rollout.Status{RolloutID: o.entry.RolloutID})
	default:
		st, requeue, err = r.Engine.Reconcile(context.WithoutCancel(ctx), d.spec, prevOf(d.entry))
	}
	if err := r.settle(ctx, u, d.entry, st, err, note); err != nil {
		return 0, err
	}
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		return 0, err
	case rollout.BadInput, rollout.Refused, rollout.Blocked:
		// Said in the policy's status; a change of the workload or the policy queues it again.
		return waitRequeue, nil
	}
	if st.Phase.Settled() {
		return 0, nil
	}
	return max(requeue, minRequeue), nil
}

// EventNotApplied is the reason of the Warning Event on a workload whose policy does nothing
// for its template (NotOnDelete, NotInPlace, Failed): `kubectl describe` of the workload says
// what the policy's status says.
const EventNotApplied = "InPlaceRolloutPolicyNotApplied"

// notApplied: an entry of phase phase says the policy did nothing for the template, and what a
// person can do about it.
func notApplied(phase string) bool {
	return phase == PhaseNotOnDelete || phase == PhaseNotInPlace || phase == string(rollout.PhaseFailed)
}

// warn records on the workload obj the Warning Event of entry, which the policy's status has
// just been given. Recorded once per change of the entry, as the status write is. An Event is a
// notice: one not recorded is logged.
func (r *Reconciler) warn(ctx context.Context, obj corev1.ObjectReference, policyName string, entry v1alpha1.PolicyWorkloadStatus, log *slog.Logger) {
	if r.Engine.Events == nil || obj.UID == "" {
		return
	}
	ev := inplace.Event{Type: corev1.EventTypeWarning, Reason: EventNotApplied,
		Message: fmt.Sprintf("%s %s: %s: %s", v1alpha1.PolicyKind, policyName, entry.Phase, entry.Message)}
	if err := r.Engine.Events.Record(ctx, obj, ev); err != nil {
		log.Warn("recording an Event", "reason", ev.Reason, "err", err)
	}
}

// prevOf is the status of the rollout entry records, for the engine: empty for a revision no
// rollout of which has started, so that a rollout ended of an earlier revision is not reported.
func prevOf(e v1alpha1.PolicyWorkloadStatus) rollout.Status {
	return rollout.Status{RolloutID: e.RolloutID}
}

// settle records in the policy's status what the engine's step says of the workload's rollout:
// its phase and counts, the failed revision when it rolled back, and the problem when it was
// refused.
func (r *Reconciler) settle(ctx context.Context, u *unstructured.Unstructured, entry v1alpha1.PolicyWorkloadStatus, st rollout.Status, err error, note string) error {
	next := entry
	o := rollout.OutcomeOf(st, err)
	switch o.Kind {
	case rollout.Retry, rollout.Unavailable, rollout.Interrupted:
		return nil
	case rollout.BadInput, rollout.Refused, rollout.Blocked:
		next.Phase, next.Reason = string(rollout.PhaseFailed), o.Kind.String()
		next.Message = fmt.Sprintf("%v; nothing more was changed; change the workload's manifest or the policy to try again", err)
	case rollout.Superseded:
		next.RolloutID = ""
		return r.writeEntry(ctx, u, next)
	default:
		next.Phase, next.Reason, next.RolloutID = string(st.Phase), string(st.Reason), st.RolloutID
		next.Message = rollout.Summary(st)
		if st.Phase.Settled() {
			next.Message = rollout.OutcomeMessage(st)
		}
		next.Batch, next.Batches, next.Updated, next.Total, next.RolledBack = int32(st.Batch), int32(st.Batches), int32(st.Updated), int32(st.Total), int32(st.RolledBack)
		next.Analysis = v1alpha1.LastVerdict(st.Analysis, st.RolloutID, entry.Analysis, entry.RolloutID)
		if st.Phase == rollout.PhaseRolledBack && note == "" && st.Reason != rollout.ReasonRollbackRequested {
			// Failed on its own: not tried again until the template changes.
			next.FailedRevision = next.Revision
		}
	}
	if note != "" {
		next.Message = note + "; " + next.Message
	}
	return r.writeEntry(ctx, u, next)
}

// observe reads what decide needs of t: the workload and its pods, its revisions, its lock,
// and the policy it names with the policy's status of it. It returns the policy as cached, for
// the status write.
func (r *Reconciler) observe(ctx context.Context, t target) (*observation, *unstructured.Unstructured, error) {
	w, err := workload.Load(ctx, r.Kube, t.ref)
	if err != nil {
		return nil, nil, err
	}
	o := &observation{ref: t.ref, onDelete: workload.OnDelete(w), podRevisions: map[string]string{}}
	o.object, _ = w.Object()
	if o.lock, err = rollout.ReadRecord(ctx, r.Kube, t.ref); err != nil {
		return nil, nil, err
	}
	var u *unstructured.Unstructured
	if t.policy != "" {
		if cached, ok := r.Policy(t.ref.Namespace, t.policy); ok {
			p, err := fromUnstructured(cached)
			if err != nil {
				return nil, nil, err
			}
			o.policy, u = p, cached
			if i := entryIndex(p, t.ref); i >= 0 {
				o.entry = p.Status.Workloads[i]
			}
		}
	}
	if tmpl := w.Template(); tmpl != nil {
		o.template = *tmpl
	}
	for _, p := range w.Pods() {
		if p.DeletionTimestamp == nil {
			o.podRevisions[p.Name] = workload.PodRevision(p)
		}
	}
	if o.policy == nil || !o.onDelete {
		return o, u, nil
	}
	if o.revisions, err = workload.ReadRevisionsOf(ctx, r.Kube, w); err != nil {
		return nil, nil, err
	}
	o.current, o.currentLabels, o.observed = workload.TemplateRevision(w, o.revisions)
	return o, u, nil
}

// dropStale removes ref's entry from the status of a policy of its namespace that ref does not
// name (named is the one it names, empty for none or a workload gone), once no rollout of that
// policy holds ref any longer (decide rolls it back first): one status write, of the first such
// policy, after which it asks to be called again for the next. Entries left by a workload that
// changed policies, or was deleted, would otherwise stay on the policy's status for good.
func (r *Reconciler) dropStale(ctx context.Context, ref workload.Ref, named string) (time.Duration, error) {
	if r.PoliciesIn == nil {
		return 0, nil
	}
	for _, u := range r.PoliciesIn(ref.Namespace) {
		if u.GetName() == named {
			continue
		}
		p, err := fromUnstructured(u)
		if err != nil {
			return 0, err
		}
		i := entryIndex(p, ref)
		if i < 0 {
			continue
		}
		p.Status.Workloads = slices.Delete(p.Status.Workloads, i, i+1)
		if err := r.writeStatus(ctx, u, p); err != nil {
			return 0, err
		}
		r.log().Info("policy status: entry removed", append(rollout.LogAttrs(ref), "policy", p.Name, "naming", named)...)
		return minRequeue, nil
	}
	return 0, nil
}

// entryIndex is the index of ref's entry in p's status, or -1.
func entryIndex(p *v1alpha1.InPlaceRolloutPolicy, ref workload.Ref) int {
	return slices.IndexFunc(p.Status.Workloads, func(e v1alpha1.PolicyWorkloadStatus) bool {
		return e.Kind == string(ref.Kind) && e.Name == ref.Name
	})
}

// writeEntry writes entry into the status of the policy u, with u's resourceVersion: a conflict
// means the policy changed since it was read (another workload's entry, say), and the next
// reconcile decides again from what it is now.
func (r *Reconciler) writeEntry(ctx context.Context, u *unstructured.Unstructured, entry v1alpha1.PolicyWorkloadStatus) error {
	if u == nil {
		// The workload names no policy that exists: there is no status to write.
		return nil
	}
	p, err := fromUnstructured(u)
	if err != nil {
		return err
	}
	ref := workload.Ref{Kind: workload.Kind(entry.Kind), Namespace: p.Namespace, Name: entry.Name}
	i := entryIndex(p, ref)
	if i >= 0 {
		cur := p.Status.Workloads[i]
		entry.LastTransitionTime = cur.LastTransitionTime
		if equality.Semantic.DeepEqual(cur, entry) {
			return nil
		}
		if cur.Phase != entry.Phase {
			entry.LastTransitionTime = metav1.NewTime(r.now())
		}
		p.Status.Workloads[i] = entry
	} else {
		entry.LastTransitionTime = metav1.NewTime(r.now())
		p.Status.Workloads = append(p.Status.Workloads, entry)
		slices.SortFunc(p.Status.Workloads, func(a, b v1alpha1.PolicyWorkloadStatus) int {
			return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
		})
	}
	return r.writeStatus(ctx, u, p)
}

// writeStatus writes p's status over that of the policy u it was decoded from, with u's
// resourceVersion.
func (r *Reconciler) writeStatus(ctx context.Context, u *unstructured.Unstructured, p *v1alpha1.InPlaceRolloutPolicy) error {
	p.Status.ObservedGeneration = p.Generation
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p.Status)
	if err != nil {
		return fmt.Errorf("encoding the status of %s %s/%s: %w", v1alpha1.PolicyKind, p.Namespace, p.Name, err)
	}
	next := u.DeepCopy()
	next.Object["status"] = status
	if _, err := r.Policies.Resource(Resource).Namespace(p.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of %s %s/%s: %w", v1alpha1.PolicyKind, p.Namespace, p.Name, err)
	}
	return nil
}

// fromUnstructured is u as an InPlaceRolloutPolicy.
func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.InPlaceRolloutPolicy, error) {
	var p v1alpha1.InPlaceRolloutPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", v1alpha1.PolicyKind, u.GetNamespace(), u.GetName(), err)
	}
	return &p, nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}
