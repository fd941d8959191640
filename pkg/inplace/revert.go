package inplace

import (
	"fmt"
	"time"

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
	case st.Stage == StageRollingBack, st.Stage == StageFailed && revertStarted(st):
		return continueRevert(pod, st, opts, now), nil
	case !imagesChanged(pod, st):
		return clearState(pod, st, now), nil
	}

	next := st.clone()
	for i := range next.Containers {
		c := &next.Containers[i]
		c.RevertImage = revertImage(c, tagMoved)
	}
	next.Stage, next.StageAt, next.Reason = StageRollingBack, stageTime(now), ""
	b := newPatch(pod).state(next)
	if hasReadinessGate(pod) && gateTrue(pod) {
		// Drain before the restart, as for the update; the images follow after the grace period.
		b.gate(corev1.ConditionFalse, "InPlaceRollingBack", now)
	} else {
		revertPatch(b, next)
	}
	s := b.step(StageRollingBack, "")
	s.RequeueAfter = pollInterval
	s.Event = &Event{corev1.EventTypeNormal, EventRollingBack, "rolling back in place: " + describeChanges(next, true)}
	return s, nil
}

// continueRevert takes the next step of a revert already recorded on the pod.
func continueRevert(pod *corev1.Pod, st *State, opts Options, now time.Time) Step {
	if st.Stage == StageFailed {
		// The revert failed, but the pod may have got there since (a slow pull finished, a
		// person fixed the cause): judge it again, and stay Failed, writing nothing, until then.
		judged := st.clone()
		judged.Stage = StageRollingBack
		if revertPatched(pod, st) && Refresh(pod, judged, opts, now).Done {
			return finish(pod, judged, StageRolledBack, now, &Event{corev1.EventTypeNormal, EventRolledBack, "rolled back in place: " + describeChanges(st, true)}, "")
		}
		return Step{Stage: st.Stage, Reason: st.Reason, Done: true}
	}
	if !revertPatched(pod, st) {
		if left := st.StageAt.Add(opts.GracePeriod).Sub(now); left > 0 {
			return wait(st, left, fmt.Sprintf("draining: %s of grace period left", left.Round(time.Second)))
		}
		b := newPatch(pod).state(st)
		revertPatch(b, st)
		s := b.step(StageRollingBack, "")
		s.RequeueAfter = pollInterval
		return s
	}
	p := Refresh(pod, st, opts, now)
	switch {
	case p.Failed:
		return fail(pod, st, now, "rollback failed: "+p.Reason, true)
	case p.Done:
		return finish(pod, st.clone(), StageRolledBack, now, &Event{corev1.EventTypeNormal, EventRolledBack, "rolled back in place: " + describeChanges(st, true)}, "")
	default:
		return wait(st, p.RequeueAfter, p.Reason)
	}
}

// revertPatch puts the revert images and the labels' previous values in one write.
func revertPatch(b *patchBuilder, st *State) {
	for _, c := range st.Containers {
		b.image(c.Name, c.Init, c.RevertImage)
	}
	for k, l := range st.Labels {
		b.label(k, l.Before)
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
	s.Event = &Event{corev1.EventTypeNormal, EventRolledBack, "in-place update cancelled before any image changed: " + describeChanges(st, false)}
	return s
}

// revertImage is BeforeImage when the tag is known to still resolve to BeforeImageID (or no
// digest was recorded), else the digest form of BeforeImageID: the exact image the container ran.
func revertImage(c *ContainerState, tagMoved TagMoved) string {
	digest := digestOf(c.BeforeImageID)
	if digest == "" || digestOf(c.BeforeImage) != "" {
		return c.BeforeImage
	}
	if tagMoved != nil {
		if moved, known := tagMoved(c.BeforeImage, c.BeforeImageID); known && !moved {
			return c.BeforeImage
		}
	}
	if pinned := pinnedImage(c.BeforeImage, digest); pinned != "" {
		return pinned
	}
	return c.BeforeImage
}

func revertStarted(st *State) bool {
	for _, c := range st.Containers {
		if c.RevertImage != "" {
			return true
		}
	}
	return false
}

// imagesChanged reports whether any container's spec image differs from its BeforeImage.
func imagesChanged(pod *corev1.Pod, st *State) bool {
	for _, c := range st.Containers {
		if spec := containerSpec(pod, c.Name, c.Init); spec != nil && spec.Image != c.BeforeImage {
			return true
		}
	}
	for k, l := range st.Labels {
		if pod.Labels[k] != l.Before {
			return true
		}
	}
	return false
}

func revertPatched(pod *corev1.Pod, st *State) bool {
	for _, c := range st.Containers {
		if spec := containerSpec(pod, c.Name, c.Init); spec == nil || spec.Image != c.RevertImage {
			return false
		}
	}
	for k, l := range st.Labels {
		if pod.Labels[k] != l.Before {
			return false
		}
	}
	return true
}

func gateTrue(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == ReadinessGate {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
