package inplace

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Judged is the stage of the update st records on pod, as the pod shows it now. A pod without
// the readiness gate is written once, with its images (stage Updating), and its end is never
// written: it is Updated once Refresh finds every changed container on its new image, Running
// and Ready, and the pod Ready; Failed once Refresh would fail it (the owner's next step then
// writes that, with the reason). Any other state is at the stage it records. Whoever reads a
// state judges it through here: the rollout that counts its pods, another rollout that finds
// the pod, a report.
func Judged(pod *corev1.Pod, st *State, now time.Time) Stage {
	if st.Stage != StageUpdating || hasReadinessGate(pod) {
		return st.Stage
	}
	switch p := Refresh(pod, st, Options{}, now); {
	case p.Done:
		return StageUpdated
	case p.Failed:
		return StageFailed
	}
	return StageUpdating
}

// UpdatedAt is when the update st records on pod ended, for a pod Judged Updated: when a state
// records the end, that; else the latest of the image patch, the start of each changed
// container's running instance, and the pod's last turn to Ready.
func UpdatedAt(pod *corev1.Pod, st *State) time.Time {
	t := st.StageAt
	if st.Stage != StageUpdating {
		return t
	}
	for _, c := range st.Containers {
		if cs := containerStatus(pod, c.Name, c.Init); cs != nil && cs.State.Running != nil && cs.State.Running.StartedAt.After(t) {
			t = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}
