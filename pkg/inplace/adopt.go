package inplace

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Adoption describes a pod a workload controller created from the rollout's new template while
// the rollout held the workload (a pod deleted and recreated, a new node's DaemonSet pod). It
// never ran the previous images, but a rollback must bring it to them as it does the pods the
// rollout updated.
type Adoption struct {
	RolloutID string
	// Images are the previous images by container; ImageIDs the imageIDs that pods running them
	// reported, when known, so the revert pins the same digests.
	Images   map[string]string
	ImageIDs map[string]string
	// Labels are the previous values of the labels the rollout changed (revision labels).
	Labels map[string]string
}

// NextAdopt records on the pod, as one write, the state of an update to its current images
// from the adoption's previous ones, at stage Updated, so that NextRevert takes it back. A pod
// that already runs the previous images needs nothing; one in the middle of an update is refused.
func NextAdopt(pod *corev1.Pod, a Adoption, now time.Time) (Step, error) {
	st, err := ReadState(pod)
	if err != nil {
		return Step{}, err
	}
	if st != nil && !Over(pod, st, now) {
		return Step{}, &IneligibleError{Pod: pod.Namespace + "/" + pod.Name, Reason: fmt.Sprintf("rollout %q is updating it (stage %s)", st.RolloutID, st.Stage)}
	}
	next := &State{RolloutID: a.RolloutID, StartedAt: stageTime(now)}
	for name, image := range a.Images {
		init := false
		spec := containerSpec(pod, name, false)
		if spec == nil {
			init, spec = true, containerSpec(pod, name, true)
		}
		if spec == nil || spec.Image == image {
			continue
		}
		c := ContainerState{Name: name, Init: init, BeforeImage: image, BeforeImageID: a.ImageIDs[name], AfterImage: spec.Image}
		if cs := containerStatus(pod, name, init); cs != nil {
			c.AfterImageID, c.RestartsBefore = cs.ImageID, cs.RestartCount
		}
		next.Containers = append(next.Containers, c)
	}
	if len(next.Containers) == 0 {
		return Step{Done: true, Reason: "already on the previous images"}, nil
	}
	for k, before := range a.Labels {
		if after := pod.Labels[k]; after != before {
			if next.Labels == nil {
				next.Labels = map[string]LabelChange{}
			}
			next.Labels[k] = LabelChange{Before: before, After: after}
		}
	}
	reason := "created from the new template during the rollout"
	next.moveTo(StageUpdated, now, reason, "")
	s := newPatch(pod).state(next).step(StageUpdated, reason)
	s.Done = true
	return s, nil
}
