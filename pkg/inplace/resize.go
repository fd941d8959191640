package inplace

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The resize of a pod's containers (KEP-1287): the resize subresource takes a strategic-merge
// patch of the containers' resources, and only that, so the state is written before it, on its
// own. The kubelet then reports, on kubelet v1.34.5 (docs/conformance.md): PodResizeInProgress
// while it applies the change, the new values in status.containerStatuses[].resources once
// applied (observedGeneration moves before that, so it proves nothing), PodResizePending with
// reason Infeasible when the node can never fit them (the spec keeps the asked values, the
// container its old ones) and Deferred when it cannot yet.

// resizes reports whether the update changes any container's resources.
func (s *State) resizes() bool {
	for i := range s.Containers {
		if s.Containers[i].resizes() {
			return true
		}
	}
	return false
}

// restarts reports whether the update restarts any container: a new image, or a resize its
// policy restarts it for.
func (s *State) restarts() bool {
	for i := range s.Containers {
		if s.Containers[i].expectedRestarts() > 0 {
			return true
		}
	}
	return false
}

// imagesChange reports whether the update changes any container's image.
func (s *State) imagesChange() bool {
	for i := range s.Containers {
		if s.Containers[i].imageChanges() {
			return true
		}
	}
	return false
}

// resizeWritten reports whether every container's spec carries the resources st moves it to
// (the before resources, reverting).
func resizeWritten(pod *corev1.Pod, st *State, reverting bool) bool {
	for _, c := range st.Containers {
		want := c.targetResources(reverting)
		if want == nil {
			continue
		}
		if spec := containerSpec(pod, c.Name, c.Init); spec == nil || !HasResources(spec.Resources, *want) {
			return false
		}
	}
	return true
}

// resizeStep is the write of the resize of st's containers to their after resources (before,
// reverting): a strategic-merge patch for the pod's resize subresource, carrying the
// resourceVersion and UID it was decided on. The state is already on the pod.
func resizeStep(pod *corev1.Pod, st *State, reverting bool) Step {
	var containers, inits []map[string]any
	for _, c := range st.Containers {
		want := c.targetResources(reverting)
		if want == nil {
			continue
		}
		r := map[string]any{}
		if len(want.Requests) > 0 {
			r["requests"] = want.Requests
		}
		if len(want.Limits) > 0 {
			r["limits"] = want.Limits
		}
		entry := map[string]any{"name": c.Name, "resources": r}
		if c.Init {
			inits = append(inits, entry)
		} else {
			containers = append(containers, entry)
		}
	}
	spec := map[string]any{}
	if len(containers) > 0 {
		spec["containers"] = containers
	}
	if len(inits) > 0 {
		spec["initContainers"] = inits
	}
	body := map[string]any{
		"metadata": map[string]any{"resourceVersion": pod.ResourceVersion, "uid": string(pod.UID)},
		"spec":     spec,
	}
	data, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("encoding pod resize: %v", err))
	}
	reason := "resizing: " + describeChanges(st, reverting)
	return Step{Patch: data, Subresource: "resize", Stage: st.Stage, Reason: reason, RequeueAfter: pollInterval}
}

// continueResize takes the next step of an update in stage Resizing: the resize, then, once the
// kubelet applied it, the images (Updating), or the end when no image changes.
func continueResize(pod *corev1.Pod, st *State, opts Options, now time.Time) Step {
	if !resizeWritten(pod, st, false) {
		return resizeStep(pod, st, false)
	}
	p := ResizeProgress(pod, st, false, opts, now)
	switch {
	case p.Failed:
		return fail(pod, st, now, p.Code, p.Reason, false)
	case !p.Done:
		return wait(st, p.RequeueAfter, p.Reason)
	case st.imagesChange():
		return enter(pod, st.clone(), StageUpdating, now, "")
	case !st.metaAt(pod, false):
		// No image changes, so no image patch carries the labels and annotations the target
		// sets (a workload's revision labels): they go on their own, before the update ends.
		s := newPatch(pod).patchImages(st.clone(), false).step(st.Stage, "setting the labels and annotations of the update")
		s.RequeueAfter = pollInterval
		return s
	}
	return finish(pod, st.clone(), StageUpdated, now, &Event{Type: corev1.EventTypeNormal, Reason: EventUpdated, Message: "resized in place: " + describeChanges(st, false)}, "")
}

// ResizeProgress judges the resize of st's containers toward their after resources (before,
// reverting), from the pod alone: Failed when the kubelet says the node can never fit them
// (Infeasible) or it could not apply them, or a container fails or restarts more than its
// resize policy restarts it; Done when every resized container's status reports the new
// values, Running and Ready, and no resize is pending or in progress; else waiting, within the
// progress deadline (a Deferred resize waits for room on the node).
func ResizeProgress(pod *corev1.Pod, st *State, reverting bool, opts Options, now time.Time) Progress {
	opts = opts.withDefaults()
	if og := pod.Status.ObservedGeneration; og != 0 && og < pod.Generation {
		// A PodResizePending from before the last resize may still show.
		return pending(pod, Progress{}, []string{fmt.Sprintf("the pod's status describes generation %d, not yet %d", og, pod.Generation)}, false, st, opts, now)
	}
	var waits []string
	if c := podCondition(pod, corev1.PodResizePending); c != nil && c.Status == corev1.ConditionTrue {
		if c.Reason == corev1.PodReasonInfeasible {
			return Progress{Failed: true, Code: FailureResizeInfeasible,
				Reason: fmt.Sprintf("ResizeInfeasible: the node cannot fit %s: %s", describeTargets(st, reverting), c.Message)}
		}
		waits = append(waits, fmt.Sprintf("resize %s: %s", strings.ToLower(c.Reason), c.Message))
	}
	if c := podCondition(pod, corev1.PodResizeInProgress); c != nil && c.Status == corev1.ConditionTrue {
		if c.Reason == corev1.PodReasonError {
			return Progress{Failed: true, Code: FailureResizeError, Reason: fmt.Sprintf("ResizeError: the kubelet could not resize %s: %s", describeTargets(st, reverting), c.Message)}
		}
		waits = append(waits, "resize in progress")
	}
	for i := range st.Containers {
		c := &st.Containers[i]
		want := c.targetResources(reverting)
		if want == nil {
			continue
		}
		cs := containerStatus(pod, c.Name, c.Init)
		if cs == nil {
			waits = append(waits, fmt.Sprintf("container %q has no status", c.Name))
			continue
		}
		unapplied := c.resizeUnapplied(cs, reverting)
		if reverting {
			// The containers may still fail on the image the revert leaves next: the
			// resize back is judged by its resources alone.
			if unapplied != "" {
				waits = append(waits, unapplied)
			}
			continue
		}
		if reason := failingReason(cs); reason != "" && c.FailingBefore == "" {
			if code := waitingFailures[reason]; code != "" {
				return Progress{Failed: true, Code: code, Reason: fmt.Sprintf("%s: container %q: %s", reason, c.Name, cs.State.Waiting.Message)}
			}
		}
		if c.FailingBefore == "" && cs.RestartCount > c.RestartsBefore+c.resizeRestarts() {
			return Progress{Failed: true, Code: FailureRestartClimb, Reason: restartsClimbed(c, cs)}
		}
		switch {
		case unapplied != "":
			waits = append(waits, unapplied)
		case c.FailingBefore == "" && (cs.State.Running == nil || !cs.Ready):
			waits = append(waits, fmt.Sprintf("container %q: resized, not Running and Ready yet", c.Name))
		}
	}
	if len(waits) > 0 {
		return pending(pod, Progress{}, waits, false, st, opts, now)
	}
	return Progress{Done: true}
}

// resizeUnapplied says which resources the container's status does not report yet of those
// the state moves it to (after, or before when reverting); "" once it reports them all, or when
// its resources do not change.
func (c *ContainerState) resizeUnapplied(cs *corev1.ContainerStatus, reverting bool) string {
	want := c.targetResources(reverting)
	if want == nil || cs.Resources != nil && HasResources(*cs.Resources, *want) {
		return ""
	}
	return fmt.Sprintf("container %q: the kubelet has not applied %s yet", c.Name, DescribeResources(*want))
}

// describeTargets says the resources st moves its containers to.
func describeTargets(st *State, reverting bool) string {
	var parts []string
	for _, c := range st.Containers {
		if want := c.targetResources(reverting); want != nil {
			parts = append(parts, fmt.Sprintf("container %q %s", c.Name, DescribeResources(*want)))
		}
	}
	return strings.Join(parts, ", ")
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
