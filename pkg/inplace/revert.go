package inplace

import (
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// TagMoved reports whether a tag now resolves to a digest other than the one a container ran
// (beforeImageID), or whether that cannot be known. Nil means it cannot be known.
type TagMoved func(image, beforeImageID string) (moved bool, known bool)

// NextRevert computes the next write that puts the pod's changed containers back on the images
// they ran before the update, from the pod as it is now. A pod whose images were never patched
// only has its state cleared. tagMoved decides, when the revert starts, whether a container goes
// back to its BeforeImage tag or to the recorded digest: the digest unless the tag is known to
// still resolve to it.
func NextRevert(pod *corev1.Pod, opts Options, now time.Time, tagMoved TagMoved) (Step, error) {
	return nextRevert(pod, opts, now, tagMoved, nil)
}

// nextRevert is NextRevert with the answer to the HTTP hook call the caller just made, if any.
func nextRevert(pod *corev1.Pod, opts Options, now time.Time, tagMoved TagMoved, answer *HookAnswer) (Step, error) {
	opts = opts.withDefaults()
	st, err := ReadState(pod)
	if err != nil {
		return Step{}, err
	}
	if st == nil {
		return Step{Done: true, Reason: "no in-place update recorded: nothing to revert"}, nil
	}
	switch {
	case st.Stage == StageRolledBack:
		return Step{Stage: st.Stage, Done: true}, nil
	case st.Stage == StageRollingBack, st.RevertFailed():
		return continueRevert(pod, st, opts, now, answer)
	case !imagesChanged(pod, st):
		if st.run(PreUpdate, false) != nil && st.Hooks.hook(PostUpdate) != nil {
			// The update's preUpdate hook ran (an instance taken out of a registry): its revert
			// has nothing to change back but runs postUpdate, then clears the state.
			return startHook(pod, st, PostUpdate, true, StageRollingBack, now), nil
		}
		return clearState(pod, st, now), nil
	}

	next := st.clone()
	var pinned []string
	for i := range next.Containers {
		c := &next.Containers[i]
		if !c.imageChanges() {
			c.RevertImage = c.BeforeImage
			continue
		}
		var why string
		c.RevertImage, why = revertImage(c, tagMoved)
		if why != "" {
			pinned = append(pinned, fmt.Sprintf("container %q goes back to %s, not %s: %s", c.Name, c.RevertImage, c.BeforeImage, why))
		}
	}
	if err := CheckRevert(pod, next, opts.RevertImages); err != nil {
		return Step{}, err
	}
	if next.Hooks.hook(PreUpdate) != nil {
		return startHook(pod, next, PreUpdate, true, StageRollingBack, now), nil
	}
	s := revertBegins(pod, next, now)
	if len(pinned) > 0 {
		s.Event.Message += "; " + strings.Join(pinned, "; ")
	}
	return s, nil
}

// hookOver reports whether the revert's hook n ended.
func hookOver(st *State, n HookName) bool {
	r := st.run(n, true)
	return r != nil && r.Outcome != ""
}

// revertHook takes the next step of the revert's hook n: starts it, waits for it, fails the
// pod by its policy (a rollback failed), or, once it ended (or none is configured), takes the
// step then gives, from the state recording how it ended.
func revertHook(pod *corev1.Pod, st *State, n HookName, answer *HookAnswer, now time.Time, then func(*State) Step) Step {
	switch v, next, reason := judgeHook(pod, st, n, true, answer, now); v {
	case hookStart:
		return startHook(pod, st, n, true, StageRollingBack, now)
	case hookWait:
		return wait(st, pollInterval, reason)
	case hookFailedPod:
		return fail(pod, next, now, FailureHook, "rollback failed: "+reason, true)
	default:
		return then(next.clone())
	}
}

// revertBegins is the first write that changes the pod back, once its preUpdate hook (if any)
// ended: the state at RollingBack, and the readiness gate False when the revert restarts a
// container of a pod with the gate, else the images unless the resources go back first.
func revertBegins(pod *corev1.Pod, next *State, now time.Time) Step {
	next.moveTo(StageRollingBack, now, "", "")
	b := newPatch(pod)
	switch {
	case hasReadinessGate(pod) && gateTrue(pod) && next.restarts():
		// Drain before the restart, as for the update; the images follow after the grace period.
		b.state(next).gate(corev1.ConditionFalse, "InPlaceRollingBack", now)
	case !resizeWritten(pod, next, true):
		// The resources go back first, through the resize subresource, which takes nothing
		// else: the state goes on its own, and the images follow once the resize is applied.
		b.state(next)
	default:
		b.patchImages(next, true)
	}
	s := b.step(StageRollingBack, "")
	s.RequeueAfter = pollInterval
	s.Event = &Event{Type: corev1.EventTypeNormal, Reason: EventRollingBack, Message: "rolling back in place: " + describeChanges(next, true)}
	return s
}

// continueRevert takes the next step of a revert already recorded on the pod; answer is the
// answer to the HTTP hook call the caller just made, if any.
func continueRevert(pod *corev1.Pod, st *State, opts Options, now time.Time, answer *HookAnswer) (Step, error) {
	if st.Stage == StageFailed && st.Failure == FailureHook {
		// A hook of the revert failed: the pod stays Failed for a person, who knows whether
		// whatever the hook tells (a registry) is right again.
		return Step{Stage: st.Stage, Reason: st.Reason, Done: true}, nil
	}
	if !revertStarted(st) && !imagesChanged(pod, st) {
		// Nothing to change back (see nextRevert): the postUpdate hook, then the state cleared.
		return revertHook(pod, st, PostUpdate, answer, now, func(next *State) Step { return clearState(pod, next, now) }), nil
	}
	if st.Stage == StageRollingBack && st.Hooks.hook(PreUpdate) != nil && !hookOver(st, PreUpdate) {
		return revertHook(pod, st, PreUpdate, answer, now, func(next *State) Step { return revertBegins(pod, next, now) }), nil
	}
	if st.Stage == StageFailed {
		// The revert failed, but the pod may have got there since (a slow pull finished, a
		// person fixed the cause): judge it again, and stay Failed, writing nothing, until then.
		judged := st.clone()
		judged.Stage = StageRollingBack
		if p := Refresh(pod, judged, opts, now); revertPatched(pod, st) && (p.Done || p.OpenGate) {
			return finish(pod, judged, StageRolledBack, now, &Event{Type: corev1.EventTypeNormal, Reason: EventRolledBack, Message: "rolled back in place: " + describeChanges(st, true)}, ""), nil
		}
		return Step{Stage: st.Stage, Reason: st.Reason, Done: true}, nil
	}
	if st.resizes() {
		if !resizeWritten(pod, st, true) {
			if left := st.StageAt.Add(opts.GracePeriod).Sub(now); left > 0 && hasReadinessGate(pod) && !gateTrue(pod) {
				return wait(st, left, fmt.Sprintf("draining: %s of grace period left", left.Round(time.Second))), nil
			}
			return resizeStep(pod, st, true), nil
		}
		switch p := ResizeProgress(pod, st, true, opts, now); {
		case p.Failed:
			return fail(pod, st, now, p.Code, "rollback failed: "+p.Reason, true), nil
		case !p.Done:
			return wait(st, p.RequeueAfter, p.Reason), nil
		}
	}
	if !revertPatched(pod, st) {
		if left := st.StageAt.Add(opts.GracePeriod).Sub(now); left > 0 {
			return wait(st, left, fmt.Sprintf("draining: %s of grace period left", left.Round(time.Second))), nil
		}
		if err := CheckRevert(pod, st, opts.RevertImages); err != nil {
			return Step{}, err
		}
		b := newPatch(pod).patchImages(st.clone(), true)
		s := b.step(StageRollingBack, "")
		s.RequeueAfter = pollInterval
		return s, nil
	}
	p := Refresh(pod, st, opts, now)
	switch {
	case p.Failed:
		return fail(pod, st, now, p.Code, "rollback failed: "+p.Reason, true), nil
	case p.OpenGate:
		return openGate(pod, st, now, p.Reason), nil
	case p.Done:
		return revertHook(pod, st, PostUpdate, answer, now, func(next *State) Step {
			return finish(pod, next, StageRolledBack, now, &Event{Type: corev1.EventTypeNormal, Reason: EventRolledBack, Message: "rolled back in place: " + describeChanges(st, true)}, "")
		}), nil
	default:
		return wait(st, p.RequeueAfter, p.Reason), nil
	}
}

// clearState removes the state of a pod whose images were never changed, and lifts the gate.
func clearState(pod *corev1.Pod, st *State, now time.Time) Step {
	b := newPatch(pod).clearState()
	if hasReadinessGate(pod) && !gateTrue(pod) {
		b.gate(corev1.ConditionTrue, "InPlaceUpdateCancelled", now)
	}
	s := b.step(StageRolledBack, "images were never changed; state cleared")
	s.Done = true
	s.Event = &Event{Type: corev1.EventTypeNormal, Reason: EventRolledBack, Message: "in-place update cancelled before any image changed: " + describeChanges(st, false)}
	return s
}

// revertImage is BeforeImage when the tag is known to still resolve to BeforeImageID (or no
// digest was recorded), else the digest form of BeforeImageID, the exact image the container
// ran, with why the tag was not used.
func revertImage(c *ContainerState, tagMoved TagMoved) (image, why string) {
	digest := digestOf(c.BeforeImageID)
	if digest == "" || digestOf(c.BeforeImage) != "" {
		return c.BeforeImage, ""
	}
	why = "whether the tag still names the content it ran (" + digest + ") could not be checked"
	if tagMoved != nil {
		moved, known := tagMoved(c.BeforeImage, c.BeforeImageID)
		switch {
		case known && !moved:
			return c.BeforeImage, ""
		case known:
			why = "the tag names other content now than the " + digest + " it ran"
		}
	}
	if pinned := pinnedImage(c.BeforeImage, digest); pinned != "" {
		return pinned, why
	}
	return c.BeforeImage, ""
}

// RevertFailed reports whether st records a revert that failed: one that changed the pod back
// and failed, or a hook of a revert that failed.
func (s *State) RevertFailed() bool {
	if s.Stage != StageFailed {
		return false
	}
	if revertStarted(s) {
		return true
	}
	for _, r := range s.HookRuns {
		if r.Reverting && r.Outcome != "" && r.Outcome != HookSucceeded {
			return true
		}
	}
	return false
}

func revertStarted(st *State) bool {
	for _, c := range st.Containers {
		if c.RevertImage != "" {
			return true
		}
	}
	return false
}

// imagesChanged reports whether any container's spec image differs from its BeforeImage, or its
// resources from its BeforeResources.
func imagesChanged(pod *corev1.Pod, st *State) bool {
	if !resizeWritten(pod, st, true) {
		return true
	}
	for _, c := range st.Containers {
		if spec := containerSpec(pod, c.Name, c.Init); spec != nil && spec.Image != c.BeforeImage {
			return true
		}
	}
	return !st.metaAt(pod, true)
}

func revertPatched(pod *corev1.Pod, st *State) bool {
	for _, c := range st.Containers {
		if spec := containerSpec(pod, c.Name, c.Init); spec == nil || spec.Image != c.RevertImage {
			return false
		}
	}
	return st.metaAt(pod, true)
}

// RevertImageError is a revert refused because the pod's state names an image the rollout did
// not record as one its pods ran before: the state was edited by hand, or belongs elsewhere.
type RevertImageError struct {
	Namespace, Pod, Container, Image string
	// Allowed are the images the rollout recorded for the container.
	Allowed []string
}

func (e *RevertImageError) Error() string {
	allowed := "none"
	if len(e.Allowed) > 0 {
		allowed = strings.Join(e.Allowed, ", ")
	}
	return fmt.Sprintf("pod %s/%s: container %q would go back to %s, not an image the rollout recorded for it (%s); its %s annotation was edited: restore it, or put the pod's images back by hand and remove the annotation, then run rollback again",
		e.Namespace, e.Pod, e.Container, e.Image, allowed, StateAnnotation)
}

// CheckRevert checks that each container of st goes back to an image allowed lists for it: one
// of them however spelled, or its repository pinned to the container's recorded BeforeImageID
// digest (what revertImage makes of a moved tag). Nil allowed checks nothing.
func CheckRevert(pod *corev1.Pod, st *State, allowed map[string][]string) error {
	if allowed == nil {
		return nil
	}
	for _, c := range st.Containers {
		if !c.imageChanges() {
			continue // its image stays as it is
		}
		imgs := []string{c.BeforeImage}
		if c.RevertImage != "" {
			imgs = append(imgs, c.RevertImage)
		}
		for _, img := range imgs {
			if !revertAllowed(img, c.BeforeImageID, allowed[c.Name]) {
				return &RevertImageError{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name, Image: img, Allowed: allowed[c.Name]}
			}
		}
	}
	return nil
}

func revertAllowed(img, beforeImageID string, allowed []string) bool {
	digest := digestOf(img)
	for _, a := range allowed {
		if SameImage(a, img) {
			return true
		}
		if digest != "" && digest == digestOf(beforeImageID) && sameRepository(a, img) {
			return true
		}
	}
	return false
}

// sameRepository reports whether two references name the same repository, whatever their tags
// or digests.
func sameRepository(a, b string) bool {
	na, errA := reference.ParseNormalizedNamed(a)
	nb, errB := reference.ParseNormalizedNamed(b)
	return errA == nil && errB == nil && na.Name() == nb.Name()
}
