package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// HolderPrefix begins the lock holder of every rollout under a policy: policy:NS/NAME, the
// policy's, with its UID.
const HolderPrefix = "policy:"

// Holder is the lock holder of the rollouts under p.
func Holder(p *v1alpha1.InPlaceRolloutPolicy) string {
	return HolderPrefix + p.Namespace + "/" + p.Name
}

// Phases a workload's entry records besides the engine's.
const (
	// PhaseNotInPlace: the template's revision changes a field a live pod cannot take; nothing
	// was changed.
	PhaseNotInPlace = "NotInPlace"
	// PhaseNotOnDelete: the workload's manifest does not say OnDelete; its own controller rolls
	// its template out, and the policy does nothing.
	PhaseNotOnDelete = "NotOnDelete"
	// PhaseWaiting: another rollout holds the workload; the policy waits for its end.
	PhaseWaiting = "Waiting"
)

// observation is what the controller saw of one workload that names a policy. It decides
// nothing.
type observation struct {
	ref workload.Ref
	// object is the workload, as the Events on it regard it.
	object corev1.ObjectReference
	// policy is the policy the workload names; nil when there is none of that name.
	policy *v1alpha1.InPlaceRolloutPolicy
	// entry is the policy's status of the workload (its zero value when it has none).
	entry v1alpha1.PolicyWorkloadStatus
	// onDelete: the workload's update strategy is OnDelete.
	onDelete bool
	// observed: the workload's controller recorded its template's revision, current, whose
	// pods carry currentLabels; template is the workload's template.
	observed      bool
	current       workload.Revision
	currentLabels map[string]string
	template      corev1.PodTemplateSpec
	// podRevisions are the revisions the workload's live pods carry, by pod name; revisions the
	// ControllerRevisions kept, by the label value.
	podRevisions map[string]string
	revisions    workload.Revisions
	// lock is the rollout record on the workload, or nil.
	lock *rollout.Record
}

// action is what the controller does for the workload.
type action int

const (
	// actNone: nothing to do or write.
	actNone action = iota
	// actRecord: write entry to the policy's status, and nothing else.
	actRecord
	// actStep: take the next step of the rollout spec, which supersedes one in flight.
	actStep
	// actRollBack: take the next step of the rollback of the rollout in flight (why says why).
	actRollBack
)

// decision is what decide chose.
type decision struct {
	action action
	// entry is the status to record (actRecord), or the entry the step starts from.
	entry v1alpha1.PolicyWorkloadStatus
	// spec is the rollout to step (actStep); rollback the rollback (actRollBack).
	spec     rollout.Spec
	rollback rollout.RollbackSpec
	why      string
	// requeue is when to look again without a change of the objects.
	requeue time.Duration
}

// Pacing of a workload nothing on the cluster says when to look at again.
const (
	// waitRequeue: another rollout holds the workload, or its controller has not recorded its
	// revision yet.
	waitRequeue = 30 * time.Second
	// revisionRequeue: the workload's controller computes its revision within moments.
	revisionRequeue = time.Second
)

// decide decides the next action for the workload of o, from o alone, in this order: a policy
// that does not exist does nothing; another holder's rollout is waited for; the rollout of the
// policy in flight is rolled back when the manifest no longer says OnDelete or its new template
// cannot be rolled out in place, and goes on (to the template's revision now) otherwise; with
// no rollout in flight, a manifest without OnDelete, a template whose revision failed before,
// and pods all at the template's revision do nothing; any other revision is rolled out when
// it can be done in place, and said not to be when it cannot.
func decide(o *observation) decision {
	inFlight := o.lock != nil && o.lock.Active()
	if inFlight && strings.HasPrefix(o.lock.Holder, HolderPrefix) && (o.policy == nil || !o.lock.HeldBy(Holder(o.policy), o.policy.UID)) {
		// The workload names no policy, or another, now: the rollout of the policy it named is
		// taken back, at the defaults' pace (one pod at a time), that policy's own pace being
		// no longer at hand.
		return decision{action: actRollBack, why: fmt.Sprintf("%s no longer names the policy of rollout %s (%s)", o.ref, o.lock.RolloutID, o.lock.Holder),
			rollback: rollout.RollbackSpec{Target: o.ref, Holder: o.lock.Holder, HolderUID: o.lock.HolderUID,
				MaxUnavailable: intstr.FromInt32(1), Timeout: v1alpha1.DefaultTimeout}}
	}
	if o.policy == nil {
		return decision{action: actNone}
	}
	c := &decider{o: o, entry: o.entry, holder: Holder(o.policy), uid: o.policy.UID, inFlight: inFlight}
	c.entry.Kind, c.entry.Name = string(o.ref.Kind), o.ref.Name
	c.ours = inFlight && o.lock.HeldBy(c.holder, c.uid)
	switch {
	case inFlight && !c.ours:
		d := c.record(PhaseWaiting, "", fmt.Sprintf("%s is held by rollout %s of %s; the policy rolls its template out once that rollout ends", o.ref, o.lock.RolloutID, o.lock.Holder))
		d.requeue = waitRequeue
		return d
	case c.ours && o.lock.Phase == rollout.PhaseRollingBack:
		// A rollback goes on to its end, whatever the template says meanwhile.
		return c.rollBack("")
	case c.ours && !o.onDelete:
		return c.rollBack(fmt.Sprintf("the manifest of %s no longer says updateStrategy OnDelete; its own controller rolls the template out", o.ref))
	case !inFlight && !o.onDelete:
		return c.record(PhaseNotOnDelete, "", fmt.Sprintf("%s's updateStrategy is not OnDelete: its own controller rolls its template out, and policy %s does nothing; to roll it out in place, say updateStrategy OnDelete in its manifest",
			o.ref, o.policy.Name))
	case !o.observed:
		return decision{action: actNone, requeue: revisionRequeue}
	}
	return c.toTemplate()
}

// decider carries what decide's branches read: the observation, the workload's entry as the
// policy's status would record it, the policy's lock holder, and whether a rollout holds the
// workload (inFlight) and is the policy's (ours).
type decider struct {
	o              *observation
	entry          v1alpha1.PolicyWorkloadStatus
	holder         string
	uid            types.UID
	inFlight, ours bool
}

// record is the decision to record phase, reason and msg on the workload's entry; none when
// the entry says so already.
func (c *decider) record(phase, reason, msg string) decision {
	next := c.entry
	next.Phase, next.Reason, next.Message = phase, reason, msg
	if next.Phase == c.entry.Phase && next.Reason == c.entry.Reason && next.Message == c.entry.Message && c.entry.Kind == c.o.entry.Kind {
		return decision{action: actNone}
	}
	return decision{action: actRecord, entry: next}
}

// rollBack is the decision to roll the policy's rollout in flight back, at the policy's pace.
func (c *decider) rollBack(why string) decision {
	return decision{action: actRollBack, entry: c.entry, why: why, rollback: rollout.RollbackSpec{Target: c.o.ref, Holder: c.holder, HolderUID: c.uid,
		MaxUnavailable: rolloutPace(c.o.policy), Timeout: timeoutOf(c.o.policy)}}
}

// toTemplate decides for a workload whose template's revision is known and which no other
// rollout holds: the rollout in flight to that revision goes on; pods all at it, or a revision
// that failed before, need nothing; a revision that cannot change in place is said so (and
// rolls the policy's rollout in flight back); any other is rolled out.
func (c *decider) toTemplate() decision {
	o := c.o
	if c.ours && o.lock.TemplateOwned && o.lock.Labels[appsv1.ControllerRevisionHashLabelKey] == o.current.Hash {
		// The rollout in flight is to the template's revision: the same rollout, as its lock
		// records it, whichever pods are still behind.
		spec, err := specOf(o, change{images: o.lock.Images, labels: o.lock.Labels, annotations: o.lock.Annotations}, c.holder, c.uid)
		if err != nil {
			d := c.record(string(rollout.PhaseFailed), ReasonInvalidPolicy, fmt.Sprintf("policy %s: %v; the rollout in flight stays where it is until the policy is fixed", o.policy.Name, err))
			d.requeue = waitRequeue
			return d
		}
		return decision{action: actStep, entry: c.entry, spec: spec}
	}
	atCurrent := 0
	for _, rev := range o.podRevisions {
		if rev == o.current.Hash {
			atCurrent++
		}
	}
	switch {
	case !c.inFlight && atCurrent == len(o.podRevisions):
		if c.entry.Revision == o.current.Name {
			return decision{action: actNone}
		}
		next := c.entry
		next.Revision, next.Phase, next.Reason, next.RolloutID = o.current.Name, string(rollout.PhaseSucceeded), "", ""
		next.Message = fmt.Sprintf("every pod of %s runs revision %s", o.ref, o.current.Name)
		next.Updated, next.Total, next.Batch, next.Batches, next.RolledBack, next.Analysis = int32(atCurrent), int32(len(o.podRevisions)), 0, 0, 0, nil
		return decision{action: actRecord, entry: next}
	case !c.inFlight && c.entry.FailedRevision == o.current.Name:
		// Rolled back; not tried again until the template changes.
		return decision{action: actNone}
	}
	ch, err := changeOf(o)
	if err != nil {
		msg := fmt.Sprintf("%v; nothing was changed. To let %s's own strategy recreate its pods instead, set its updateStrategy to RollingUpdate in its manifest", err, o.ref)
		if c.ours {
			return c.rollBack(fmt.Sprintf("the template's new revision cannot be rolled out in place: %v", err))
		}
		d := c.record(PhaseNotInPlace, "", msg)
		if d.action == actRecord {
			d.entry.Revision = o.current.Name
		}
		return d
	}
	spec, err := specOf(o, ch, c.holder, c.uid)
	if err != nil {
		d := c.record(string(rollout.PhaseFailed), ReasonInvalidPolicy, fmt.Sprintf("policy %s: %v; nothing was changed; fix the policy", o.policy.Name, err))
		if c.ours {
			// The policy changed under its rollout: the rollout stays as it is until it is fixed.
			d.requeue = waitRequeue
		}
		return d
	}
	return c.start(spec)
}

// start is the decision to roll spec, the template's revision, out: unless the lock says this
// very rollout rolled back, though the status did not get to say so, which is remembered now
// and not tried again.
func (c *decider) start(spec rollout.Spec) decision {
	o, entry := c.o, c.entry
	if !c.inFlight && o.lock != nil && o.lock.HeldBy(c.holder, c.uid) && o.lock.Phase == rollout.PhaseRolledBack && o.lock.SpecHash == spec.Hash() &&
		o.lock.Reason != rollout.ReasonRollbackRequested {
		next := entry
		next.Revision, next.FailedRevision, next.Phase, next.RolloutID = o.current.Name, o.current.Name, string(rollout.PhaseRolledBack), o.lock.RolloutID
		next.Reason, next.Message = string(o.lock.Reason), fmt.Sprintf("rollout %s of revision %s rolled back: %s", o.lock.RolloutID, o.current.Name, o.lock.Message)
		return decision{action: actRecord, entry: next}
	}
	if entry.Revision != o.current.Name {
		// Another revision's rollout: its own counts; the failure remembered was of another
		// template, which may come back later and is then tried again.
		entry = v1alpha1.PolicyWorkloadStatus{Kind: entry.Kind, Name: entry.Name, Revision: o.current.Name}
	}
	return decision{action: actStep, entry: entry, spec: spec}
}

// ReasonInvalidPolicy: the policy's spec is refused; nothing was changed.
const ReasonInvalidPolicy = "InvalidPolicy"

// change is what the template's revision changes in place on the pods behind it: the images
// and the CPU and memory values by container, and the labels and annotations with their new
// values ("" for a removed key).
type change struct {
	images, labels, annotations map[string]string
	resources                   map[string]inplace.Resources
}

// changeOf is what the pods not at the template's revision take in place to be at it, from the
// revisions they run, or an error naming the pod and field that cannot change in place.
func changeOf(o *observation) (change, error) {
	c := change{images: map[string]string{}, labels: map[string]string{}, annotations: map[string]string{}, resources: map[string]inplace.Resources{}}
	includeInit := o.policy.Spec.IncludeInit
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(o.podRevisions)) {
		hash := o.podRevisions[name]
		if hash == o.current.Hash || seen[hash] {
			continue
		}
		seen[hash] = true
		rev, ok := o.revisions[hash]
		if !ok {
			return change{}, fmt.Errorf("pod %s runs revision %q of %s, which no ControllerRevision records any longer, so what changes from it is unknown", name, hash, o.ref)
		}
		tc, err := inplace.DiffTemplates(rev.Template, o.template, includeInit)
		if err != nil {
			return change{}, fmt.Errorf("revision %s of %s's template cannot be taken in place by pod %s, at revision %s: %w", o.current.Name, o.ref, name, rev.Name, err)
		}
		maps.Copy(c.images, tc.Images)
		maps.Copy(c.resources, tc.Resources)
		for _, m := range []struct {
			from map[string]*string
			to   map[string]string
		}{{tc.Labels, c.labels}, {tc.Annotations, c.annotations}} {
			for k, v := range m.from {
				m.to[k] = ""
				if v != nil {
					m.to[k] = *v
				}
			}
		}
	}
	if len(c.images) == 0 && len(c.resources) == 0 {
		// Labels or annotations alone: the pods take them with the images they run.
		for _, list := range [][]corev1.Container{o.template.Spec.Containers} {
			for _, ct := range list {
				c.images[ct.Name] = ct.Image
			}
		}
	}
	maps.Copy(c.labels, o.currentLabels)
	return c, nil
}

// specOf is the rollout under the policy of o's workload to the template's revision.
func specOf(o *observation, c change, holder string, uid types.UID) (rollout.Spec, error) {
	if o.policy.Spec.OnInconclusive == rollout.InconclusivePause {
		return rollout.Spec{}, fmt.Errorf("spec.onInconclusive: pause waits for a person to accept the batch, and a policy's rollouts have no object to accept it on; use fail or continue")
	}
	doc := o.policy.Spec.RolloutSpec(v1alpha1.Target{Kind: string(o.ref.Kind), Name: o.ref.Name}, c.images)
	if len(c.resources) > 0 {
		doc.Resources = c.resources
	}
	spec, err := rollout.FromV1alpha1(&doc, rollout.Caller{Namespace: o.ref.Namespace, Holder: holder, HolderUID: uid})
	if err != nil {
		return rollout.Spec{}, err
	}
	spec.TemplateOwned, spec.Supersede = true, true
	spec.Labels, spec.Annotations = c.labels, c.annotations
	if len(spec.Annotations) == 0 {
		spec.Annotations = nil
	}
	if err := spec.Validate(); err != nil {
		return rollout.Spec{}, fmt.Errorf("%s's template: %w", o.ref, err)
	}
	return spec, nil
}

// rolloutPace is the policy's maxUnavailable, or one pod at a time.
func rolloutPace(p *v1alpha1.InPlaceRolloutPolicy) intstr.IntOrString {
	if p != nil && p.Spec.MaxUnavailable != nil {
		return *p.Spec.MaxUnavailable
	}
	return intstr.FromInt32(1)
}

// timeoutOf is the policy's progress deadline, or the default.
func timeoutOf(p *v1alpha1.InPlaceRolloutPolicy) time.Duration {
	if p != nil && p.Spec.Timeout != nil && p.Spec.Timeout.Duration > 0 {
		return p.Spec.Timeout.Duration
	}
	return v1alpha1.DefaultTimeout
}

// describe is the entry's one-line summary, for logs.
func describe(e v1alpha1.PolicyWorkloadStatus) string {
	return strings.TrimSpace(fmt.Sprintf("%s/%s revision %s %s %s", e.Kind, e.Name, e.Revision, e.Phase, e.Reason))
}
