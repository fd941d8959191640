package inplace

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// NextUpdate computes the next write that moves pod toward target, from the pod as it is now.
// Bad input (unknown container, invalid image) and pods that cannot be updated return an error
// and no write. Calling it again after any write, or after a crash, continues where the pod is.
func NextUpdate(pod *corev1.Pod, target Target, opts Options, now time.Time) (Step, error) {
	return nextUpdate(pod, target, opts, now, nil)
}

// nextUpdate is NextUpdate with the answer to the HTTP hook call the caller just made, if any.
func nextUpdate(pod *corev1.Pod, target Target, opts Options, now time.Time, answer *HookAnswer) (Step, error) {
	opts = opts.withDefaults()
	st, err := ReadState(pod)
	if err != nil {
		return Step{}, err
	}
	if st != nil && st.RolloutID == target.RolloutID {
		return continueUpdate(pod, st, opts, now, answer), nil
	}
	b, err := beginUpdate(pod, st, target, opts, now)
	if err != nil || b.step != nil {
		return b.stepOrZero(), err
	}
	return enter(pod, b.next, b.stage, now, b.reason), nil
}

// ImagePatch is the write of the step that patches the pod's images to target (stage
// Updating), composed from the pod as observed as if the steps before it (Preparing, Draining)
// were done: byte for byte what NextUpdate's step would send, the state annotation with the
// containers' images in one strategic-merge patch carrying the pod's resourceVersion. A dry run
// sends it to learn whether the API server's admission lets it through. A pod NextUpdate
// refuses is refused with the same error; nil when there is no image to patch: the pod runs the
// target already, its images are patched already, or a superseded update must finish first.
func ImagePatch(pod *corev1.Pod, target Target, now time.Time) ([]byte, error) {
	st, err := ReadState(pod)
	if err != nil {
		return nil, err
	}
	if st != nil && st.RolloutID == target.RolloutID {
		if st.Stage != StagePreparing && st.Stage != StagePreUpdateHook && st.Stage != StageDraining {
			return nil, nil
		}
		return enter(pod, st.clone(), StageUpdating, now, "").Patch, nil
	}
	b, err := beginUpdate(pod, st, target, Options{}.withDefaults(), now)
	if err != nil || b.step != nil {
		return nil, err
	}
	return enter(pod, b.next, StageUpdating, now, "").Patch, nil
}

// ResizePatch is the write of the step that resizes the pod's containers to target (stage
// Resizing), composed from the pod as observed as if the steps before it were done: byte for
// byte what NextUpdate's step would send to the pod's resize subresource. A dry run sends it to
// learn whether the API server lets it through. A pod NextUpdate refuses is refused with the
// same error; nil when no resource changes, or the resize is written already.
func ResizePatch(pod *corev1.Pod, target Target, now time.Time) ([]byte, error) {
	st, err := ReadState(pod)
	if err != nil {
		return nil, err
	}
	var next *State
	if st != nil && st.RolloutID == target.RolloutID {
		next = st.clone()
	} else {
		b, err := beginUpdate(pod, st, target, Options{}.withDefaults(), now)
		if err != nil || b.step != nil {
			return nil, err
		}
		next = b.next
	}
	if !next.resizes() || resizeWritten(pod, next, false) {
		return nil, nil
	}
	next.moveTo(StageResizing, now, "", "")
	return resizeStep(pod, next, false).Patch, nil
}

// begun is how an update not yet recorded on the pod begins: with step, the step NextUpdate
// takes instead (nothing to do, a state to clear, a superseded update to finish); else the state
// next, entered at stage with reason.
type begun struct {
	step   *Step
	next   *State
	stage  Stage
	reason string
}

func (b begun) stepOrZero() Step {
	if b.step == nil {
		return Step{}
	}
	return *b.step
}

// beginUpdate decides how an update of the pod to target begins, from st, the pod's state of
// another rollout or nil.
func beginUpdate(pod *corev1.Pod, st *State, target Target, opts Options, now time.Time) (begun, error) {
	instead := func(s Step, err error) (begun, error) { return begun{step: &s}, err }
	superseding := supersedes(st, target)
	if othersInFlight(pod, st, superseding, now) {
		if !superseding {
			return begun{}, busy(pod, st)
		}
		// A superseded update whose images are already patched finishes first, so the pod is
		// judged against one target at a time and restarts at most once more.
		if st.Stage == StageRollingBack {
			return instead(continueRevert(pod, st, opts, now, nil))
		}
		return instead(continueUpdate(pod, st, opts, now, nil), nil)
	}
	plan, err := Diff(pod, target)
	if err != nil {
		return begun{}, err
	}
	if err := CheckHookPorts(pod.Spec, target.Hooks); err != nil {
		return begun{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if plan.NoOp() && metaSet(pod, target) {
		if !superseding {
			return instead(Step{Done: true, Reason: plan.String()}, nil)
		}
		if !imagesChanged(pod, st) {
			// The superseded rollout never patched this pod and the pod already runs the target.
			return instead(clearState(pod, st, now), nil)
		}
	}
	refused := canStart(pod, plan, superseding)
	var ie *IneligibleError
	preparing := errors.As(refused, &ie) && ie.ImageIDPending
	if refused != nil && !preparing {
		return begun{}, refused
	}
	next, err := startState(pod, st, plan, target, superseding, now)
	if err != nil {
		return begun{}, err
	}
	if preparing {
		return begun{next: next, stage: StagePreparing, reason: refused.Error()}, nil
	}
	return begun{next: next, stage: firstStage(pod, next)}, nil
}

// firstStage is the stage an update of pod to st enters once every container to change has
// reported what it runs: PreUpdateHook when the rollout has a preUpdate hook, else the stage
// that changes the pod (beforeChange).
func firstStage(pod *corev1.Pod, st *State) Stage {
	if st.Hooks.hook(PreUpdate) != nil {
		return StagePreUpdateHook
	}
	return beforeChange(pod, st)
}

// beforeChange is the stage after the preUpdate hook: Draining when the pod has the readiness
// gate and a container will restart, else Resizing when resources change, else Updating. A
// resize that restarts nothing leaves the pod serving, so it is not drained.
func beforeChange(pod *corev1.Pod, st *State) Stage {
	if hasReadinessGate(pod) && st.restarts() {
		return StageDraining
	}
	return afterDrain(st)
}

// afterDrain is the stage after Draining: Resizing when resources change, else Updating.
func afterDrain(st *State) Stage {
	if st.resizes() {
		return StageResizing
	}
	return StageUpdating
}

// Refusal is why NextUpdate would neither start nor continue an update of pod at now, from the
// pod and st, its state as ReadState read it: the *IneligibleError NextUpdate would return, with Wait
// when its reason should pass (the pod is not scheduled or not Running yet, a container to
// change has no status) and without when it will not (another rollout is updating the pod, it
// is being deleted, its restartPolicy cannot restart a container). Nil when NextUpdate would
// write, has nothing to do, or rejects the target itself (Diff's errors, NextUpdate's to
// report). A caller learns, before it steps any pod, which pods cannot start.
func Refusal(pod *corev1.Pod, st *State, target Target, now time.Time) *IneligibleError {
	if st != nil && st.RolloutID == target.RolloutID {
		return nil
	}
	superseding := supersedes(st, target)
	if othersInFlight(pod, st, superseding, now) {
		if superseding {
			return nil
		}
		return busy(pod, st)
	}
	if startsAnyPlan(pod, target) {
		return nil // no plan toward target is refused: the plan need not be worked out
	}
	plan, err := Diff(pod, target)
	if err != nil || plan.NoOp() && metaSet(pod, target) && (!superseding || !imagesChanged(pod, st)) {
		return nil
	}
	var ie *IneligibleError
	if errors.As(canStart(pod, plan, superseding), &ie) && !ie.ImageIDPending {
		return ie
	}
	return nil
}

// supersedes reports whether st is the state of a rollout target supersedes.
func supersedes(st *State, target Target) bool {
	return st != nil && slices.Contains(target.Supersedes, st.RolloutID)
}

// othersInFlight reports whether another rollout's update is in flight on the pod (st is not
// the target rollout's), not over at now: one the target does not supersede, or a superseded
// one that already patched the images and finishes first. A superseded one that never got to
// the images is taken over.
func othersInFlight(pod *corev1.Pod, st *State, superseding bool, now time.Time) bool {
	return st != nil && !Over(pod, st, now) && !(superseding && !imagesPatched(pod, st))
}

// busy refuses a pod another rollout is updating.
func busy(pod *corev1.Pod, st *State) *IneligibleError {
	return &IneligibleError{Pod: pod.Namespace + "/" + pod.Name, Reason: fmt.Sprintf("rollout %q is updating it (stage %s)", st.RolloutID, st.Stage)}
}

// canStart is CanUpdate for an update about to start: a pod that already runs the target needs
// only its labels, which any pod can have.
func canStart(pod *corev1.Pod, plan Plan, superseding bool) error {
	if plan.NoOp() && !superseding {
		return nil
	}
	return CanUpdate(pod, plan)
}

// startsAnyPlan reports whether CanUpdate lets the pod start whichever of the containers target
// names change: it is not being deleted, restarts its containers, runs on a node, and every
// container target names has a status (one with no imageID yet is prepared for, not refused).
func startsAnyPlan(pod *corev1.Pod, target Target) bool {
	if podRefusal(pod) != nil {
		return false
	}
	for _, names := range []iter.Seq[string]{maps.Keys(target.Images), maps.Keys(target.Resources)} {
		for name := range names {
			if containerStatus(pod, name, containerSpec(pod, name, false) == nil) == nil {
				return false
			}
		}
	}
	return true
}

// startState is the state an update starts with: the containers plan changes, with what they
// run now, and the labels target sets. Taking over a superseded update (st), it keeps what the
// pod ran before that one.
func startState(pod *corev1.Pod, st *State, plan Plan, target Target, superseding bool, now time.Time) (*State, error) {
	next := &State{RolloutID: target.RolloutID, Revision: target.Revision, StartedAt: stageTime(now), Hooks: target.Hooks}
	for _, ch := range plan.Changes {
		cs := containerStatus(pod, ch.Container, ch.Init)
		c := ContainerState{Name: ch.Container, Init: ch.Init, BeforeImage: ch.From, AfterImage: ch.To}
		if ch.Resources != nil {
			c.BeforeResources, c.AfterResources = ch.FromResources.DeepCopy(), ch.Resources.DeepCopy()
			c.ResizeRestarts = restartsOnResize(containerSpec(pod, ch.Container, ch.Init), *ch.FromResources, *ch.Resources)
		}
		if cs != nil {
			c.BeforeImageID, c.RestartsBefore, c.FailingBefore = cs.ImageID, cs.RestartCount, failingBeforeReason(cs)
		}
		if superseding {
			if prev := st.container(ch.Container); prev != nil {
				c.BeforeImage, c.BeforeImageID = prev.BeforeImage, prev.BeforeImageID
				if prev.BeforeResources != nil && c.BeforeResources != nil {
					c.BeforeResources = prev.BeforeResources.DeepCopy()
				}
				if c.BeforeImageID != "" && cs != nil && cs.ImageID != c.BeforeImageID {
					c.FromImageID = cs.ImageID
				}
			}
		}
		c.ResizeOnly = c.AfterResources != nil && ch.From == ch.To && c.BeforeImage == c.AfterImage
		next.Containers = append(next.Containers, c)
	}
	var prevLabels, prevAnnotations map[string]LabelChange
	if superseding {
		prevLabels, prevAnnotations = st.Labels, st.Annotations
	}
	next.Labels = metaChanges(pod.Labels, target.Labels, prevLabels)
	next.Annotations = metaChanges(pod.Annotations, target.Annotations, prevAnnotations)
	if !superseding {
		return next, nil
	}
	// Containers the earlier rollout changed and this one leaves alone keep their record,
	// so a rollback still returns them to their last stable image.
	for _, prev := range st.Containers {
		if next.container(prev.Name) == nil {
			next.Containers = append(next.Containers, prev)
		}
	}
	if plan.NoOp() && !imagesPatchedTo(pod, next) {
		return nil, fmt.Errorf("pod %s/%s: superseding rollout %q changes no image", pod.Namespace, pod.Name, st.RolloutID)
	}
	next.StartedAt = st.StartedAt
	return next, nil
}

// metaChanges records each key of target (labels or annotations) with the value the pod has
// now, or the one a superseded update recorded (prev) as before it, and its target value; a key
// the superseded update set and target does not name keeps its record, so that a revert still
// puts it back. Nil for no keys.
func metaChanges(have, target map[string]string, prev map[string]LabelChange) map[string]LabelChange {
	if len(target) == 0 && len(prev) == 0 {
		return nil
	}
	out := make(map[string]LabelChange, len(target)+len(prev))
	for k, p := range prev {
		out[k] = p
	}
	for k, v := range target {
		before := have[k]
		if p, ok := prev[k]; ok {
			before = p.Before
		}
		out[k] = LabelChange{Before: before, After: v}
	}
	return out
}

// enter writes st at the given stage with the stage's side effect: the hook's start for a hook
// stage, the readiness gate False for Draining, the images for Updating.
func enter(pod *corev1.Pod, st *State, stage Stage, now time.Time, reason string) Step {
	switch stage {
	case StagePreUpdateHook:
		return startHook(pod, st, PreUpdate, false, stage, now)
	case StagePostUpdateHook:
		return startHook(pod, st, PostUpdate, false, stage, now)
	}
	st.moveTo(stage, now, reason, "")
	b := newPatch(pod)
	var ev *Event
	switch stage {
	case StageDraining:
		b.state(st).gate(corev1.ConditionFalse, "InPlaceUpdateDraining", now)
		ev = &Event{Type: corev1.EventTypeNormal, Reason: EventUpdating, Message: "draining before in-place update: " + describeChanges(st, false)}
	case StageResizing:
		// The resize subresource takes only resources, so the state goes first, on its own,
		// and the resize is the next step's write.
		b.state(st)
		ev = &Event{Type: corev1.EventTypeNormal, Reason: EventUpdating, Message: "resizing in place: " + describeChanges(st, false)}
	case StageUpdating:
		b.patchImages(st, false)
		ev = &Event{Type: corev1.EventTypeNormal, Reason: EventUpdating, Message: "updating in place: " + describeChanges(st, false)}
	default:
		b.state(st)
	}
	s := b.step(stage, reason)
	s.Event = ev
	s.RequeueAfter = pollInterval
	return s
}

// continueUpdate takes the next step of an update already recorded on the pod; answer is the
// answer to the HTTP hook call the caller just made, if any.
func continueUpdate(pod *corev1.Pod, st *State, opts Options, now time.Time, answer *HookAnswer) Step {
	switch st.Stage {
	case StagePreparing:
		next := st.clone()
		var missing []string
		for i := range next.Containers {
			c := &next.Containers[i]
			cs := containerStatus(pod, c.Name, c.Init)
			if c.BeforeImageID != "" {
				continue
			}
			if cs != nil && (cs.ImageID != "" || failingBeforeReason(cs) != "") {
				c.BeforeImageID, c.RestartsBefore, c.FailingBefore = cs.ImageID, cs.RestartCount, failingBeforeReason(cs)
				continue
			}
			missing = append(missing, c.Name)
		}
		if len(missing) > 0 {
			if now.Sub(st.StageAt) >= opts.ProgressDeadline {
				return fail(pod, st, now, FailureDeadlineExceeded,
					fmt.Sprintf("ProgressDeadlineExceeded: container %s reported no imageID within %s", strings.Join(missing, ", "), opts.ProgressDeadline), false)
			}
			return wait(st, pollInterval, fmt.Sprintf("waiting for container %s to report an imageID", strings.Join(missing, ", ")))
		}
		return enter(pod, next, firstStage(pod, next), now, "")
	case StagePreUpdateHook, StagePostUpdateHook:
		return continueHook(pod, st, answer, now)
	case StageDraining:
		if left := st.StageAt.Add(opts.GracePeriod).Sub(now); left > 0 {
			return wait(st, left, fmt.Sprintf("draining: %s of grace period left", left.Round(time.Second)))
		}
		return enter(pod, st.clone(), afterDrain(st), now, "")
	case StageResizing:
		return continueResize(pod, st, opts, now)
	case StageUpdating:
		p := Refresh(pod, st, opts, now)
		switch {
		case p.Failed:
			return fail(pod, st, now, p.Code, p.Reason, false)
		case p.OpenGate:
			return openGate(pod, st, now, p.Reason)
		case p.Done && !hasReadinessGate(pod) && st.Hooks.hook(PostUpdate) == nil:
			// The image patch was the update's one write: its end is judged from the pod
			// (Judged), never written.
			reason := "updated in place: " + describeChanges(st, false)
			if p.Unhealthy != "" {
				reason = p.Unhealthy
			}
			return Step{Stage: StageUpdated, Reason: reason, Done: true}
		case p.Done:
			next := st.clone()
			for i := range next.Containers {
				next.Containers[i].AfterImageID = p.ImageIDs[next.Containers[i].Name]
			}
			if st.Hooks.hook(PostUpdate) != nil {
				return enter(pod, next, StagePostUpdateHook, now, "")
			}
			return updated(pod, next, now, p.Unhealthy)
		default:
			return wait(st, p.RequeueAfter, p.Reason)
		}
	case StageRollingBack:
		// The rollout that started this update is rolling it back; that is the revert's job.
		return Step{Stage: st.Stage, Reason: "rolling back", RequeueAfter: pollInterval}
	default: // Updated, Failed, RolledBack
		return Step{Stage: st.Stage, Reason: st.Reason, Done: true}
	}
}

// continueHook takes the next step of an update whose hook runs (stage PreUpdateHook or
// PostUpdateHook): waits for it, fails the pod by its policy, or goes on once it ended.
func continueHook(pod *corev1.Pod, st *State, answer *HookAnswer, now time.Time) Step {
	n := PreUpdate
	if st.Stage == StagePostUpdateHook {
		n = PostUpdate
	}
	switch v, next, reason := judgeHook(pod, st, n, false, answer, now); v {
	case hookStart:
		return startHook(pod, st, n, false, st.Stage, now)
	case hookWait:
		return wait(st, pollInterval, reason)
	case hookFailedPod:
		return fail(pod, next, now, FailureHook, reason, false)
	default:
		if n == PreUpdate {
			return enter(pod, next, beforeChange(pod, next), now, "")
		}
		return updated(pod, next, now, "")
	}
}

// updated records the end of the update, with how the pod fails as it did before, if it does
// (unhealthy).
func updated(pod *corev1.Pod, st *State, now time.Time, unhealthy string) Step {
	if unhealthy != "" {
		return finish(pod, st, StageUpdated, now, &Event{Type: corev1.EventTypeWarning, Reason: EventUpdated, Message: "updated in place, failing as before: " + unhealthy}, unhealthy)
	}
	return finish(pod, st, StageUpdated, now, &Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "updated in place: " + describeChanges(st, false)}, "")
}

// finish records a terminal success stage, with a reason when there is something to report;
// with a readiness gate the gate goes True in the same write, and the kubelet then marks the pod
// Ready.
func finish(pod *corev1.Pod, st *State, stage Stage, now time.Time, ev *Event, reason string) Step {
	st.moveTo(stage, now, reason, "")
	b := newPatch(pod).state(st)
	if hasReadinessGate(pod) {
		b.gate(corev1.ConditionTrue, "InPlaceUpdateDone", now)
	}
	s := b.step(stage, reason)
	s.Done, s.Event = true, ev
	return s
}

// openGate sets the readiness gate True on a pod whose containers are done, keeping its stage:
// the kubelet then sets the pod Ready, and the stage moves on once it has. The state goes in the
// same write with the reason, so the pod says why it waits, and every write an updater makes
// carries the state it decided on.
func openGate(pod *corev1.Pod, st *State, now time.Time, reason string) Step {
	next := st.clone()
	next.Reason = reason
	s := newPatch(pod).state(next).gate(corev1.ConditionTrue, "InPlaceUpdateReady", now).step(st.Stage, reason)
	s.RequeueAfter = pollInterval
	return s
}

// fail records the Failed stage with the reason and its code. The pod keeps its images until
// reverted.
func fail(pod *corev1.Pod, st *State, now time.Time, code FailureCode, reason string, reverting bool) Step {
	next := st.clone()
	next.moveTo(StageFailed, now, reason, code)
	s := newPatch(pod).state(next).step(StageFailed, reason)
	s.Done = true
	evReason := EventUpdateFailed
	if reverting {
		evReason = EventRollbackFailed
	}
	s.Event = &Event{Type: corev1.EventTypeWarning, Reason: evReason, Message: reason}
	return s
}

// metaSet reports whether the pod carries every label and annotation of target with its value
// (an empty value: without the key).
func metaSet(pod *corev1.Pod, target Target) bool {
	for k, v := range target.Labels {
		if pod.Labels[k] != v {
			return false
		}
	}
	for k, v := range target.Annotations {
		if pod.Annotations[k] != v {
			return false
		}
	}
	return true
}

// imagesPatched reports whether the pod spec already carries any after image of st that differs
// from its before image, or after resources that differ from its before resources: the kubelet
// may be acting on them.
func imagesPatched(pod *corev1.Pod, st *State) bool {
	for _, c := range st.Containers {
		spec := containerSpec(pod, c.Name, c.Init)
		switch {
		case spec == nil:
		case c.imageChanges() && spec.Image != c.BeforeImage && spec.Image == c.AfterImage:
			return true
		case c.resizes() && !HasResources(spec.Resources, *c.BeforeResources) && HasResources(spec.Resources, *c.AfterResources):
			return true
		}
	}
	return false
}

// imagesPatchedTo reports whether every container of st already has its after image in the spec.
func imagesPatchedTo(pod *corev1.Pod, st *State) bool {
	for _, c := range st.Containers {
		if spec := containerSpec(pod, c.Name, c.Init); spec == nil || spec.Image != c.AfterImage {
			return false
		}
	}
	return true
}

func describeChanges(st *State, reverting bool) string {
	parts := make([]string, 0, len(st.Containers))
	for _, c := range st.Containers {
		var what []string
		switch {
		case !c.imageChanges():
		case reverting:
			what = append(what, fmt.Sprintf("%s -> %s", c.AfterImage, c.RevertImage))
		default:
			what = append(what, fmt.Sprintf("%s -> %s", c.BeforeImage, c.AfterImage))
		}
		switch {
		case !c.resizes():
		case reverting:
			what = append(what, fmt.Sprintf("%s -> %s", DescribeResources(*c.AfterResources), DescribeResources(*c.BeforeResources)))
		default:
			what = append(what, fmt.Sprintf("%s -> %s", DescribeResources(*c.BeforeResources), DescribeResources(*c.AfterResources)))
		}
		parts = append(parts, c.Name+" "+strings.Join(what, " and "))
	}
	return strings.Join(parts, ", ")
}
