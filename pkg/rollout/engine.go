package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Engine reconciles rollouts one bounded step at a time (Reconcile, Abort, Accept); a Driver
// calls it until a rollout settles. It keeps nothing between calls: every fact it needs is on
// the workload (its lock annotation) and the pods (their state annotations).
type Engine struct {
	Client kubernetes.Interface
	// Pods lists the pods a step observes: a PodWatch of the target (WatchPods) answers from its
	// cache instead of a LIST of every pod on every step; nil lists them from the API server.
	// The workload object, which carries the lock, is read from the API server either way.
	Pods PodLister
	// Events records the Events of the pods and of the workload; nil records none.
	Events inplace.EventRecorder
	// Notifier sends a rollout's outcomes out of the cluster (a webhook); nil sends none.
	Notifier Notifier
	// Registry resolves target tags to digests, and tells a revert whether a tag still resolves
	// to the digest a pod ran; nil resolves nothing: targets keep their tags and reverts go to
	// the recorded digests.
	Registry *registry.Resolver
	// PullerImage is the image holding the puller binary that pre-pull runs on each node: the
	// driver's own image. Empty refuses a spec with PrePull.
	PullerImage string
	// Log receives one line per event, each naming the namespace, the workload and, once
	// known, the rollout id; nil discards.
	Log *slog.Logger
	// Metrics receives the rollouts' events; nil records none.
	Metrics Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Querier answers every analysis' PromQL queries; nil builds a Prometheus client per
	// configuration, from the spec.
	Querier analysis.Querier

	mu          sync.Mutex
	clients     map[string]*analysis.Client // by clientKey
	clientOrder []string                    // keys, oldest first
}

// Intervals at which Reconcile asks to be called again.
const (
	busyRequeue = 200 * time.Millisecond
	idleRequeue = time.Second
)

// Reconcile observes the workload and its pods, takes one bounded step (one workload write, or
// one write for each of at most max-unavailable pods) and returns the new status and, while the
// phase is not settled, when to call again (the phase and message are the status's). Errors of
// type *InvalidError are bad input, with nothing written; *PermanentError an API error no retry
// fixes; *BlockedError something only a person can fix; *SupersededError says that prev's
// rollout was replaced. Other errors are worth a retry. Drive calls it until the rollout
// settles. A rollout that ended is reported as ended when prev names it, and started anew when
// prev is empty (a new run after a rollback).
func (e *Engine) Reconcile(ctx context.Context, spec Spec, prev Status) (Status, time.Duration, error) {
	st, res, err := e.reconcile(ctx, spec, prev)
	return st, res, classify(err, st)
}

func (e *Engine) reconcile(ctx context.Context, spec Spec, prev Status) (Status, time.Duration, error) {
	if err := spec.Validate(); err != nil {
		return prev, 0, err
	}
	w, lock, err := e.load(ctx, spec.Target)
	if err != nil {
		return prev, 0, err
	}
	if prev.RolloutID != "" && lock != nil && lock.RolloutID != prev.RolloutID && slices.Contains(lock.Superseded, prev.RolloutID) {
		return prev, 0, &SupersededError{RolloutID: prev.RolloutID, By: lock.RolloutID}
	}
	hash := spec.Hash()
	switch {
	case lock != nil && !lock.Active() && prev.RolloutID == lock.RolloutID && lock.HeldBy(spec.Holder, spec.HolderUID):
		// prev's rollout ended in a step whose status the caller did not get (a driver stopped
		// between the two): it reports that end rather than start the images afresh.
		return e.ended(w, lock)
	case lock == nil || !lock.Active():
		return e.start(ctx, spec, w, lock, hash)
	case !lock.HeldBy(spec.Holder, spec.HolderUID) && !spec.TakeOver:
		return prev, 0, holderRefusal(w, lock, spec.Holder, "change it")
	case !lock.HeldBy(spec.Holder, spec.HolderUID):
		return e.takeOver(ctx, w, lock, spec.Holder, spec.HolderUID)
	case lock.SpecHash != hash:
		return e.supersede(ctx, spec, w, lock, hash)
	case lock.Phase == PhaseRollingBack:
		return e.rollBack(ctx, spec.Rollback(), w, lock)
	case lock.Phase == PhasePaused:
		return e.paused(w, lock)
	}
	return e.progress(ctx, spec, w, lock)
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) log() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.New(slog.DiscardHandler)
}

// updater steps pods with the given wait between drain and restart, and progress deadline,
// logging to log.
func (e *Engine) updater(grace, deadline time.Duration, log *slog.Logger) *inplace.Updater {
	u := &inplace.Updater{
		Client: e.Client,
		Events: e.podEvents(),
		Log:    log,
		Now:    e.Now,
		// The soak is the batch's (see decideProgress), not each pod's: a pod counts as updated
		// once its new containers run Ready.
		Options: inplace.Options{GracePeriod: grace, ProgressDeadline: deadline},
	}
	if w, ok := e.Pods.(workload.WrittenPods); ok {
		u.Wrote = w.Wrote
	}
	return u
}

// start checks that the rollout can begin and writes the lock with the freeze, or reports that
// a rollout with this spec already succeeded: it observes the workload (observeStart), decides
// (decideStart), observing what the network tells only once the decision needs it, and takes
// the step.
func (e *Engine) start(ctx context.Context, spec Spec, w workload.Workload, lock *Record, hash string) (Status, time.Duration, error) {
	if spec.TemplateOwned {
		var err error
		if w, err = workload.Owned(w); err != nil {
			return Status{}, 0, err
		}
	}
	c, d := e.observeAndDecideStart(ctx, spec, w, lock, hash)
	switch d.action {
	case startSucceeded:
		return e.finished(w, lock, PhaseSucceeded, "rollout "+lock.RolloutID+" succeeded")
	case startRefuse:
		return Status{}, 0, d.err
	case startWait:
		return Status{Phase: PhaseProgressing, Message: d.message}, busyRequeue, nil
	case startAlreadyThere:
		n := len(c.pods)
		return Status{Phase: PhaseSucceeded, Total: n, Updated: n, Message: d.message}, 0, nil
	}
	return e.begin(ctx, spec, w, lock, c, d.next)
}

// observeAndDecideStart observes the start of a rollout (observeStart) and decides it
// (decideStart), observing what only the network tells once the decision asks for it.
func (e *Engine) observeAndDecideStart(ctx context.Context, spec Spec, w workload.Workload, lock *Record, hash string) (*startCensus, startDecision) {
	c := observeStart(spec, w, lock, e.PullerImage != "")
	d := decideStart(c, spec, lock, hash, e.now())
	for d.action == startLook {
		e.lookFurther(ctx, spec, w, lock, c, d.look)
		d = decideStart(c, spec, lock, hash, e.now())
	}
	return c, d
}

// startCensus is what the start of a rollout observes of the workload and its pods. It decides
// nothing. What only the network tells (whether a succeeded rollout's tags still name its
// digests, whether the analysis can query Prometheus, the digests the registry pins the targets
// to) is observed by lookFurther once decideStart asks for it, so that a start refused, or
// waiting for the controller, asks nothing of Prometheus or a registry.
type startCensus struct {
	ref   workload.Ref
	total int
	pods  []*corev1.Pod
	// canPrePull says the driver has the image holding the puller binary.
	canPrePull bool
	// applied says every pod still has the images and resources of the rollout the lock records.
	applied bool
	// startErr, hooksErr, keepErr, ownedErr, statesErr and beforeErr are what each check of the
	// workload found, in the order they are reported; before are the images a revert may go back
	// to.
	startErr, hooksErr, keepErr, ownedErr, statesErr, beforeErr error
	before                                                      map[string][]string
	// unready name the pods not Ready; onTarget counts the pods on the spec's images as given
	// and its resources, and templateOnTarget says the template has them (or there is none).
	unready          []string
	onTarget         int
	templateOnTarget bool
	// previous and previousStrategy are what the workload records to be handed back.
	previous         workload.Change
	previousStrategy json.RawMessage

	// looked are the facts lookFurther observed, below.
	looked map[startFact]bool
	// stillPinned says the tags of the rollout that succeeded still name the digests it pinned.
	stillPinned bool
	// prometheusErr is why the analysis cannot query Prometheus.
	prometheusErr error
	// pin is what the registry said of the targets, or pinErr why the start is refused;
	// onContent counts the pods on the target content, and templateOnPin says the template
	// has the pinned images.
	pin           pinning
	pinErr        error
	onContent     int
	templateOnPin bool
}

// startFact is a fact of a start that only the network tells.
type startFact int

const (
	factPinned startFact = iota + 1
	factPrometheus
	factPins
)

// observeStart reads what a start is decided on from the workload as loaded.
func observeStart(spec Spec, w workload.Observed, lock *Record, canPrePull bool) *startCensus {
	pods := w.Pods()
	c := &startCensus{ref: w.Ref(), total: w.Replicas(), pods: pods, canPrePull: canPrePull, looked: map[startFact]bool{}}
	if lock != nil {
		c.applied = stillApplied(pods, lock.target())
	}
	c.startErr = w.CheckStart(spec.change(), spec.IncludeInit)
	c.hooksErr = workload.CheckHookPorts(w, spec.Hooks)
	c.keepErr = workload.CheckKeep(w, spec.Keep)
	c.ownedErr = workload.CheckOwned(w, spec.AllowOwned)
	c.statesErr = checkStates(w)
	c.before, c.beforeErr = beforeImages(w, spec.Images, nil)
	for _, p := range pods {
		if !inplace.PodReady(p) {
			c.unready = append(c.unready, p.Name)
		}
		if w.Counted(p, spec.change(), spec.Labels) && annotated(p, spec.Annotations) {
			c.onTarget++
		}
	}
	tmpl := w.Template()
	c.templateOnTarget = tmpl == nil || workload.TemplateHas(tmpl, spec.change())
	c.previous, c.previousStrategy = w.Previous(spec.change())
	return c
}

// lookFurther observes what decideStart asked for: the registry for the digests, or
// Prometheus.
func (e *Engine) lookFurther(ctx context.Context, spec Spec, w workload.Workload, lock *Record, c *startCensus, what startFact) {
	c.looked[what] = true
	switch what {
	case factPinned:
		c.stillPinned = e.stillPinned(ctx, spec, w, lock)
	case factPrometheus:
		q, err := e.querier(ctx, spec)
		if err == nil {
			_, _, err = q.Query(ctx, "vector(1)")
		}
		c.prometheusErr = err
	case factPins:
		c.pin, c.pinErr = e.pinTargets(ctx, spec, w, true)
		if c.pinErr != nil {
			return
		}
		// Pods count as on the target by content: the pinned spelling, or the tag as the digest
		// it names now.
		for _, p := range c.pods {
			if c.pin.onContent(w, p, spec.change()) {
				c.onContent++
			}
		}
		tmpl := w.Template()
		c.templateOnPin = tmpl != nil && workload.TemplateHas(tmpl, workload.Change{Images: c.pin.images, Resources: spec.Resources})
	}
}

// startAction is what the start of a rollout does.
type startAction int

const (
	// startBegin writes the lock with the freeze: the rollout starts.
	startBegin startAction = iota
	// startLook observes a fact only the network tells, then decides again.
	startLook
	// startSucceeded reports the rollout with this spec that succeeded.
	startSucceeded
	startRefuse
	// startWait waits for the workload's controller.
	startWait
	// startAlreadyThere reports that the pods run the images already: nothing to do.
	startAlreadyThere
)

// startDecision is what decideStart chose, with what the step needs.
type startDecision struct {
	action startAction
	look   startFact
	// err is the refusal; message what a wait or a workload already there says.
	err     error
	message string
	// next is the lock startBegin writes.
	next *Record
}

// decideStart decides the start of a rollout from what observeStart (and lookFurther) saw,
// alone, in this order: a rollout with this spec that succeeded is reported; then the checks
// refuse, or wait for the controller, each in turn; a workload on the images already is
// reported; else the rollout begins. A fact not observed yet that the decision needs is asked
// for (startLook).
func decideStart(c *startCensus, spec Spec, lock *Record, hash string, now time.Time) startDecision {
	if lock != nil && lock.HeldBy(spec.Holder, spec.HolderUID) && lock.SpecHash == hash && lock.Phase == PhaseSucceeded {
		// A rollout to these images that was rolled back is no reason to refuse: running again
		// starts a new one, from what the pods run now. Asked anew, a rollout is done only while
		// every pod still has its images (someone may have moved them on since, or the workload
		// recreated them from another template) and, pinned to digests, while its tags still
		// name them: a tag pushed again since starts a new one, to the new content. A driver
		// calling again for the rollout it drives gets its end reported, without asking any
		// registry.
		switch {
		case !spec.Rerun:
			return startDecision{action: startSucceeded}
		case c.applied && !c.looked[factPinned]:
			return startDecision{action: startLook, look: factPinned}
		case c.applied && c.stillPinned:
			return startDecision{action: startSucceeded}
		}
	}
	if d, ok := refuseStart(c, spec); ok {
		return d
	}
	if !c.looked[factPins] {
		return startDecision{action: startLook, look: factPins}
	}
	if c.pinErr != nil {
		return startDecision{action: startRefuse, err: c.pinErr}
	}
	onTarget := c.onTarget
	if len(c.pin.digests) > 0 {
		onTarget = c.onContent
	}
	if onTarget == len(c.pods) && (c.templateOnTarget || c.templateOnPin) {
		msg := alreadyThere(c.ref.String(), c.pods, spec.Images)
		if len(spec.Images) == 0 {
			msg = fmt.Sprintf("%s already has these resources; nothing to do", c.ref)
		}
		if checked := c.pin.checked(); len(checked) > 0 {
			msg = fmt.Sprintf("%s already runs these images, as %s; nothing to do", c.ref, describePinned(checked, spec.Images))
		}
		return startDecision{action: startAlreadyThere, message: msg}
	}
	next := &Record{
		Holder:       spec.Holder,
		HolderUID:    spec.HolderUID,
		RolloutID:    rolloutID(hash, now),
		SpecHash:     hash,
		Images:       c.pin.images,
		Resources:    spec.Resources,
		BeforeImages: c.before,
		Phase:        PhaseProgressing,
		StartedAt:    now.UTC().Truncate(time.Second),
		// Recorded now, for the workload to be handed back as it was.
		PreviousImages:    c.previous.Images,
		PreviousResources: c.previous.Resources,
		PreviousStrategy:  c.previousStrategy,
		TemplateOwned:     spec.TemplateOwned,
		Labels:            spec.Labels,
		Annotations:       spec.Annotations,
	}
	if lock != nil && next.RolloutID == lock.RolloutID {
		// Started again within the second the last one did: the pods must tell them apart.
		next.RolloutID = rolloutID(hash, lock.StartedAt.Add(time.Second))
	}
	return startDecision{action: startBegin, next: next}
}

// refuseStart is the refusal of a start, or its wait for the controller, in the order the checks
// are reported; ok is false when every check passes. The check of Prometheus is asked for first
// when the spec has an analysis.
func refuseStart(c *startCensus, spec Spec) (d startDecision, ok bool) {
	refuse := func(err error) (startDecision, bool) { return startDecision{action: startRefuse, err: err}, true }
	if spec.PrePull && len(spec.Images) > 0 && !c.canPrePull {
		return refuse(invalid("%s: pre-pull needs the image holding the puller binary, and this driver has none; run without pre-pull", c.ref))
	}
	var nr *workload.NotReadyError
	if errors.As(c.startErr, &nr) {
		return startDecision{action: startWait, message: nr.Msg}, true
	}
	for _, err := range []error{c.startErr, c.hooksErr, c.keepErr, c.ownedErr} {
		if err != nil {
			return refuse(err)
		}
	}
	for _, err := range []error{c.statesErr, c.beforeErr} {
		if err != nil {
			return refuse(err)
		}
	}
	if spec.Analysis != nil && !c.looked[factPrometheus] {
		// Check that the analysis can query Prometheus before anything changes.
		return startDecision{action: startLook, look: factPrometheus}, true
	}
	if spec.Analysis != nil && c.prometheusErr != nil {
		return refuse(invalid("analysis cannot query Prometheus, so the rollout did not start: %v", c.prometheusErr))
	}
	if len(c.unready) > 0 && !spec.AllowUnready {
		return refuse(&InvalidError{Msg: fmt.Sprintf("%s: %d pods are not Ready (%s); fix them first",
			c.ref, len(c.unready), strings.Join(firstN(c.unready, 5), ", ")), Fix: FixAllowUnready})
	}
	if _, err := ResolveBatches(spec.Batches, c.total); err != nil {
		return refuse(err)
	}
	return startDecision{}, false
}

// begin writes the lock next with the freeze: the rollout starts.
func (e *Engine) begin(ctx context.Context, spec Spec, w workload.Workload, lock *Record, c *startCensus, next *Record) (Status, time.Duration, error) {
	if lock != nil {
		// Puller pods a rollout killed before its end left behind go with it.
		if _, err := e.removePullers(ctx, w.Ref().Namespace, lock.Rollouts()); err != nil {
			return Status{}, 0, err
		}
	}
	if err := w.Start(ctx, next.encode(), next.target()); err != nil {
		return Status{}, 0, err
	}
	e.collectPodLocks(ctx, w.Ref())
	if tags := observeTagDigests(c.pods, c.pin.unpinned(spec.Images)); len(tags.split()) > 0 {
		e.warnTagDigests(ctx, w.Ref(), next.RolloutID, c.pods, tags, spec.Images)
	}
	e.warnUnresolved(w.Ref(), next.RolloutID, spec.Images, c.pin.unresolved)
	e.logFor(w.Ref(), next.RolloutID).Info("rollout started", "images", mustJSON(next.Images), "resources", mustJSON(next.Resources), "pods", len(c.pods))
	e.recordOn(ctx, w, next.RolloutID, startedEvent(next, spec.Batches, w.Replicas(), ""))
	st := Status{RolloutID: next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Message: "started"}
	return st, 0, nil
}

// supersede replaces the rollout in flight with one to the spec's images. Pods keep the last
// stable image as their BeforeImage, so a rollback returns to what ran before the first one. It
// observes the workload (observeSupersede), decides (decideSupersede), asking the registry only
// once the decision needs the digests, and writes the new lock.
func (e *Engine) supersede(ctx context.Context, spec Spec, w workload.Workload, lock *Record, hash string) (Status, time.Duration, error) {
	c := observeSupersede(spec, w, lock)
	d := decideSupersede(c, spec, lock, hash, e.now())
	if d.needPins {
		c.pinned = true
		c.pin, c.pinErr = e.pinTargets(ctx, spec, w, false)
		d = decideSupersede(c, spec, lock, hash, e.now())
	}
	if d.err != nil {
		return Status{}, 0, d.err
	}
	if err := w.Retarget(ctx, d.next.encode(), d.next.target()); err != nil {
		return Status{}, 0, err
	}
	e.warnUnresolved(w.Ref(), d.next.RolloutID, spec.Images, c.pin.unresolved)
	e.logFor(w.Ref(), d.next.RolloutID).Info("rollout superseded", "superseded", lock.RolloutID, "images", mustJSON(d.next.Images), "resources", mustJSON(d.next.Resources))
	e.recordOn(ctx, w, d.next.RolloutID, startedEvent(d.next, spec.Batches, w.Replicas(), lock.RolloutID))
	st := Status{RolloutID: d.next.RolloutID, Phase: PhaseProgressing, Total: w.Replicas(), Reason: ReasonSuperseded, Message: "superseded " + lock.RolloutID}
	return st, 0, nil
}

// supersedeCensus is what a rollout that supersedes another observes of the workload. It
// decides nothing; the registry is asked for the digests only once decideSupersede needs them.
type supersedeCensus struct {
	ref workload.Ref
	// imagesErr, hooksErr, keepErr and statesErr are what each check of the workload found, in
	// the order they are reported. The pods are mid-rollout, so only the images, resources and
	// hook ports are checked, not the controller's state.
	imagesErr, hooksErr, keepErr, statesErr error
	// before are the images a revert may go back to, the lock's with those of containers the
	// earlier rollouts left alone, or beforeErr why they cannot be recorded; nil when the lock
	// records none.
	before    map[string][]string
	beforeErr error
	// pinned says the registry was asked: pin is what it said, or pinErr why the rollout is
	// refused.
	pinned bool
	pin    pinning
	pinErr error
	// previous are the template's resources now, of the values the spec names: the previous
	// resources of those the lock does not record yet (the earlier rollouts left them alone).
	previous map[string]inplace.Resources
}

// observeSupersede reads what a rollout that supersedes lock's is decided on from the workload
// as loaded.
func observeSupersede(spec Spec, w workload.Observed, lock *Record) *supersedeCensus {
	c := &supersedeCensus{ref: w.Ref()}
	c.imagesErr = workload.CheckChange(w, spec.change(), spec.IncludeInit)
	if spec.TemplateOwned && lock.TemplateOwned {
		// The owner's template must have the new images: w is Owned (load), whose CheckStart
		// says so, and that its strategy is still OnDelete.
		c.imagesErr = w.CheckStart(spec.change(), spec.IncludeInit)
	}
	if len(spec.Resources) > 0 {
		prev, _ := w.Previous(workload.Change{Resources: spec.Resources})
		c.previous = prev.Resources
	}
	c.hooksErr = workload.CheckHookPorts(w, spec.Hooks)
	c.keepErr = workload.CheckKeep(w, spec.Keep)
	c.statesErr = checkStates(w)
	if lock.BeforeImages != nil {
		// Containers the earlier rollouts left alone get their before images recorded now.
		c.before, c.beforeErr = beforeImages(w, spec.Images, lock.BeforeImages)
	}
	return c
}

// supersedeDecision is the refusal of a rollout that supersedes another (err), the lock it
// writes (next), or, with needPins, that the registry must be asked first.
type supersedeDecision struct {
	needPins bool
	err      error
	next     *Record
}

// decideSupersede decides whether a rollout replaces lock's in flight, from what
// observeSupersede saw, alone: it is refused unless asked to supersede, while the rollout in
// flight is halted or ending, or when a check of the workload or the registry refuses.
func decideSupersede(c *supersedeCensus, spec Spec, lock *Record, hash string, now time.Time) supersedeDecision {
	refuse := func(err error) supersedeDecision { return supersedeDecision{err: err} }
	if !spec.Supersede {
		return refuse(&InvalidError{Msg: fmt.Sprintf("%s has rollout %s in progress to other images (%s)",
			c.ref, lock.RolloutID, describeChange(lock.target())), Fix: FixSupersede})
	}
	if spec.TemplateOwned != lock.TemplateOwned {
		return refuse(invalid("%s: rollout %s brings its pods to %s, and this one to %s; roll it back first, then start the new rollout",
			c.ref, lock.RolloutID, templateOf(lock.TemplateOwned), templateOf(spec.TemplateOwned)))
	}
	switch lock.Phase {
	case PhaseProgressing, PhasePaused, PhaseHolding:
	case PhaseHalted:
		if lock.TemplateOwned {
			// The owner changed its template again: the new revision supersedes.
			break
		}
		return refuse(invalid("%s: rollout %s stopped because someone else changed the template (%s); roll it back first, then start the new rollout", c.ref, lock.RolloutID, lock.Message))
	default:
		return refuse(invalid("%s: rollout %s is %s; wait for it to finish before starting another", c.ref, lock.RolloutID, lock.Phase))
	}
	for _, err := range []error{c.imagesErr, c.hooksErr, c.keepErr, c.statesErr} {
		if err != nil {
			return refuse(err)
		}
	}
	switch {
	case !c.pinned:
		return supersedeDecision{needPins: true}
	case c.pinErr != nil:
		return refuse(c.pinErr)
	case c.beforeErr != nil:
		return refuse(c.beforeErr)
	}
	next := *lock
	if lock.BeforeImages != nil {
		next.BeforeImages = c.before
	}
	next.Superseded = lock.Rollouts()
	next.RolloutID = rolloutID(hash, now)
	next.SpecHash = hash
	next.Images = c.pin.images
	next.Resources = spec.Resources
	next.PreviousResources = withPrevious(lock.PreviousResources, c.previous)
	next.Labels, next.Annotations = spec.Labels, spec.Annotations
	if lock.TemplateOwned {
		// The previous images are the owner's template, now the new one: a pod its controller
		// creates from it is the template's, not a stray a rollback takes back (see
		// workload.Owned).
		next.PreviousImages = maps.Clone(c.pin.images)
		next.PreviousResources = spec.Resources
	}
	next.StartedAt = now.UTC().Truncate(time.Second)
	next.Phase, next.Message, next.Reason = PhaseProgressing, "", ""
	next.AcceptedPods, next.AcceptedAll, next.HeldAt, next.Analysis = 0, false, 0, nil
	// The new rollout counts its own pods updated, from none.
	next.Reported = 0
	return supersedeDecision{next: &next}
}

// annotated reports whether the pod carries every annotation with its value (an empty value:
// without the key), as a rollout to the owner's template sets them.
func annotated(p *corev1.Pod, annotations map[string]string) bool {
	for k, v := range annotations {
		if p.Annotations[k] != v {
			return false
		}
	}
	return true
}

// templateOf says whose template a rollout brings the pods to.
func templateOf(owned bool) string {
	if owned {
		return "the template its owner wrote"
	}
	return "images it writes in the template"
}

// ended reports the end of the rollout lock records, which no longer holds the workload.
func (e *Engine) ended(w workload.Workload, lock *Record) (Status, time.Duration, error) {
	id := lock.RolloutID
	switch lock.Phase {
	case PhaseSucceeded:
		return e.finished(w, lock, PhaseSucceeded, "rollout "+id+" succeeded")
	case PhaseRolledBack:
		return e.finished(w, lock, PhaseRolledBack, "rollout "+id+" rolled back: "+lock.Message)
	case PhaseReleased:
		return e.finished(w, lock, PhaseReleased, "rollout "+id+" was released")
	}
	st, res, err := e.finished(w, lock, PhaseFailed, "rollout "+id+" failed: "+lock.Message)
	st.Reason = Reason(lock.Reason)
	return st, res, err
}

// finished reports a rollout that already ended, with its pods counted from their states.
func (e *Engine) finished(w workload.Workload, lock *Record, phase Phase, msg string) (Status, time.Duration, error) {
	st := Status{RolloutID: lock.RolloutID, Phase: phase, Total: w.Replicas(), Message: msg}
	if phase == PhaseRolledBack {
		st.Reason = Reason(lock.Reason)
	}
	stages := countStages(w, lock.RolloutID, e.now())
	st.Updated, st.RolledBack = stages[inplace.StageUpdated], stages[inplace.StageRolledBack]
	return st, 0, nil
}

// firstN keeps the first n of s and says how many more there were, so messages stay small.
func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// checkStates reads every pod's state before the first write: one that cannot be read would
// stop the rollout later, with the workload already frozen.
func checkStates(w workload.Observed) error {
	for _, p := range w.Pods() {
		if _, err := inplace.ReadState(p); err != nil {
			return &InvalidError{Msg: err.Error(), Fix: FixStateAnnotation}
		}
	}
	return nil
}

// maxBeforeImages bounds the distinct images per container a lock records as run before the
// rollout, so the lock stays small whatever the number of pods.
const maxBeforeImages = 16

// beforeImages returns known with, for each container of images it lacks, the distinct images
// the workload's template and pods run: the images a revert may go back to. More than
// maxBeforeImages for one container is refused, as the lock could not record them.
func beforeImages(w workload.Observed, images map[string]string, known map[string][]string) (map[string][]string, error) {
	out := make(map[string][]string, len(images))
	for name, imgs := range known {
		out[name] = slices.Clone(imgs)
	}
	add := func(spec corev1.PodSpec, who string) error {
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for _, c := range list {
				if _, ok := images[c.Name]; !ok || known[c.Name] != nil || slices.Contains(out[c.Name], c.Image) {
					continue
				}
				if len(out[c.Name]) >= maxBeforeImages {
					return invalid("%s: container %q runs more than %d different images across its pods (%s is one more); roll them out in smaller groups, with a narrower selector",
						w.Ref(), c.Name, maxBeforeImages, who)
				}
				out[c.Name] = append(out[c.Name], c.Image)
			}
		}
		return nil
	}
	if tmpl := w.Template(); tmpl != nil {
		if err := add(tmpl.Spec, "the template"); err != nil {
			return nil, err
		}
	}
	for _, p := range w.Pods() {
		if err := add(p.Spec, "pod "+p.Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SupersededError says that the rollout a caller was driving was replaced by another of the
// same holder, which carries its pods on.
type SupersededError struct {
	// RolloutID is the caller's rollout; By the one that replaced it.
	RolloutID, By string
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("rollout %s was superseded by rollout %s; this command's pods are carried on by it", e.RolloutID, e.By)
}

// BlockedError is something on the cluster only a person can fix (a pod's state annotation
// edited into something unreadable): this step wrote nothing, and the same call goes on once it
// is fixed.
type BlockedError struct{ Msg string }

func (e *BlockedError) Error() string { return e.Msg }

// PermanentError is an API error no retry fixes (bad request, forbidden, not found, invalid):
// the caller stops and shows it.
type PermanentError struct {
	Err error
	// RollingBack says a rollback was in progress, and is left incomplete.
	RollingBack bool
	// RolloutID, when set, is the rollout the step was driving, left in flight: the workload
	// still held and Updated pods on the new images. Once the cause is fixed, the same call goes
	// on from there, or a rollback undoes it. Empty, the step changed nothing.
	RolloutID string
	Updated   int
}

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// classify gives an error from a step the type that tells the caller whether to retry.
func classify(err error, st Status) error {
	var (
		inv *InvalidError
		sup *SupersededError
		blk *BlockedError
		se  *inplace.StateError
		le  *workload.LockError
	)
	switch {
	case err == nil, errors.As(err, &inv), errors.As(err, &sup), errors.As(err, &blk):
		return err
	case errors.As(err, &se):
		return &BlockedError{fmt.Sprintf("%v; restore it or remove it (if the pod was updated, put its images back by hand first), then run the same command again to go on, or roll back", err)}
	case errors.As(err, &le):
		return &BlockedError{fmt.Sprintf("%v; nothing was changed: restore the annotation (or correct the field it names), then run the same command again", le)}
	case permanentAPIError(err):
		return &PermanentError{Err: err, RollingBack: st.Phase == PhaseRollingBack, RolloutID: st.RolloutID, Updated: st.Updated}
	}
	return err
}

// permanentAPIError reports whether err carries an API status that no retry changes. Conflicts,
// timeouts, throttling, 5xx and connection errors are not.
func permanentAPIError(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusNotAcceptable, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// withPrevious is recorded, the previous resources a lock records, with the values of now it
// lacks: a rollout that supersedes another and changes resources the other left alone records
// what the template had of them, as the first rollout recorded its own.
func withPrevious(recorded, now map[string]inplace.Resources) map[string]inplace.Resources {
	if len(now) == 0 {
		return recorded
	}
	out := make(map[string]inplace.Resources, len(recorded)+len(now))
	for name, r := range recorded {
		out[name] = *r.DeepCopy()
	}
	for name, r := range now {
		have := out[name]
		for res, q := range r.Requests {
			if _, ok := have.Requests[res]; !ok {
				if have.Requests == nil {
					have.Requests = corev1.ResourceList{}
				}
				have.Requests[res] = q
			}
		}
		for res, q := range r.Limits {
			if _, ok := have.Limits[res]; !ok {
				if have.Limits == nil {
					have.Limits = corev1.ResourceList{}
				}
				have.Limits[res] = q
			}
		}
		out[name] = have
	}
	return out
}
