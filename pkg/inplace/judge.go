package inplace

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Judged is the stage of the update st records on pod, as the pod shows it now. A pod without
// the readiness gate is written once, with its images (stage Updating), and its end is never
// written: it is Updated once Refresh finds every changed container on its new image, Running
// and Ready, and the pod Ready; Failed once Refresh finds a container failing (a crash loop, a
// pull or configuration error, a restart climb) and the owner's next step would write that.
// Only the owner, which knows its progress deadline, fails a pod that makes no progress. A pod
// whose rollout has a postUpdate hook has its end written, after the hook. Any other state is at
// the stage it records. Whoever reads a state judges it through here: the
// rollout that counts its pods, another rollout that finds the pod, a report.
func Judged(pod *corev1.Pod, st *State, now time.Time) Stage {
	stage, _ := JudgedReason(pod, st, now)
	return stage
}

// JudgedReason is Judged with why, as the state's reason would say it had the end been written:
// for a pod Updated while it fails as it did before the update, that it is reported and not
// blamed on the new image; for one Failed, how it fails.
func JudgedReason(pod *corev1.Pod, st *State, now time.Time) (Stage, string) {
	if st.Stage != StageUpdating || hasReadinessGate(pod) {
		return st.Stage, st.Reason
	}
	switch p := Refresh(pod, st, Options{}, now); {
	case p.Done && st.Hooks.hook(PostUpdate) != nil:
		// The postUpdate hook runs before the pod counts as updated: its owner writes that end.
		return StageUpdating, "waiting for the postUpdate hook to start"
	case p.Done:
		return StageUpdated, p.Unhealthy
	case p.Failed && p.Code != FailureDeadlineExceeded:
		return StageFailed, p.Reason
	}
	return StageUpdating, st.Reason
}

// Over reports whether the update st records on pod, another rollout's, is over for whoever
// finds the pod (another rollout, an adoption, a rollback looking for strays): its stage is
// terminal as Judged, or, without the readiness gate, every changed container already runs a
// new instance of its target (took), Ready or not: that update's one write has been acted on,
// and a pod of a finished rollout that turns unready is down, not busy.
func Over(pod *corev1.Pod, st *State, now time.Time) bool {
	if Judged(pod, st, now).Terminal() {
		return true
	}
	return st.Stage == StageUpdating && !hasReadinessGate(pod) && st.Hooks.hook(PostUpdate) == nil && took(pod, st)
}

// took reports whether the kubelet acted on the image patch of st: each changed container's
// status describes an instance of its target other than the one the patch replaced, or the one
// it kept (stillReplaced).
func took(pod *corev1.Pod, st *State) bool {
	for i := range st.Containers {
		c := &st.Containers[i]
		spec := containerSpec(pod, c.Name, c.Init)
		if spec == nil || spec.Image != c.AfterImage {
			return false
		}
		if c.Init && !NativeSidecar(*spec) {
			continue // a completed init container is not run again
		}
		cs := containerStatus(pod, c.Name, c.Init)
		if cs == nil || c.stillReplaced(pod, cs, c.AfterImage) || cs.ContainerID == "" || !c.onTarget(cs, c.AfterImage, false) {
			return false
		}
	}
	return true
}

// UpdatedAt is when the update st records on pod ended, for a pod Judged Updated: when a state
// records the end, that; else the latest of the image patch, the start of each changed
// container's running instance, and the pod's last turn to Ready.
func UpdatedAt(pod *corev1.Pod, st *State) time.Time {
	if st.Stage != StageUpdating {
		return st.StageAt
	}
	// A pod Judged Updated is Ready: its Ready condition's last turn was to True.
	return progressSince(pod, st)
}

// RanImageIDs is the containers of st with the AfterImageID of each, where st records none,
// taken from the pod's status: an update without the readiness gate ends with no write, and
// the pod reports what its new containers run.
func RanImageIDs(pod *corev1.Pod, st *State) []ContainerState {
	out := slices.Clone(st.Containers)
	for i := range out {
		if cs := containerStatus(pod, out[i].Name, out[i].Init); out[i].AfterImageID == "" && cs != nil {
			out[i].AfterImageID = cs.ImageID
		}
	}
	return out
}
