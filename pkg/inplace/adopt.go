package inplace

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Adoption describes a pod a workload controller created from the rollout's new template while
// the rollout held the workload (a pod deleted and recreated, a new node's DaemonSet pod). It
// never ran the previous images or resources, but a rollback must bring it to them as it does
// the pods the rollout updated.
type Adoption struct {
	RolloutID string
	// Images are the previous images by container; ImageIDs the imageIDs that pods running them
	// reported, when known, so the revert pins the same digests.
	Images   map[string]string
	ImageIDs map[string]string
	// Resources are the previous resources by container, of the values the rollout changed.
	Resources map[string]Resources
	// Labels are the previous values of the labels the rollout changed (revision labels).
	Labels map[string]string
}

// NextAdopt records on the pod, as one write, the state of an update to its current images and
// resources from the adoption's previous ones, at stage Updated, so that NextRevert takes it
// back. A pod that already has the previous ones needs nothing; one in the middle of an update
// is refused.
func NextAdopt(pod *corev1.Pod, a Adoption, now time.Time) (Step, error) {
	st, err := ReadState(pod)
	if err != nil {
		return Step{}, err
	}
	if st != nil && !Over(pod, st, now) {
		return Step{}, &IneligibleError{Pod: pod.Namespace + "/" + pod.Name, Reason: fmt.Sprintf("rollout %q is updating it (stage %s)", st.RolloutID, st.Stage)}
	}
	next := &State{RolloutID: a.RolloutID, StartedAt: stageTime(now)}
	names := slices.Sorted(maps.Keys(a.Images))
	for name := range a.Resources {
		if _, ok := a.Images[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		init := false
		spec := containerSpec(pod, name, false)
		if spec == nil {
			init, spec = true, containerSpec(pod, name, true)
		}
		if spec == nil {
			continue
		}
		image, named := a.Images[name]
		imageChanged := named && spec.Image != image
		before, resized := a.Resources[name]
		resized = resized && !HasResources(spec.Resources, before)
		if !imageChanged && !resized {
			continue
		}
		c := ContainerState{Name: name, Init: init, BeforeImage: spec.Image, AfterImage: spec.Image}
		if imageChanged {
			c.BeforeImage, c.BeforeImageID = image, a.ImageIDs[name]
		}
		if resized {
			after := ResourcesOf(spec.Resources, before)
			c.BeforeResources, c.AfterResources, c.ResizeOnly = before.DeepCopy(), &after, !imageChanged
		}
		if cs := containerStatus(pod, name, init); cs != nil {
			c.AfterImageID, c.RestartsBefore = cs.ImageID, cs.RestartCount
			if !imageChanged {
				c.BeforeImageID = cs.ImageID
			}
		}
		next.Containers = append(next.Containers, c)
	}
	if len(next.Containers) == 0 {
		return Step{Done: true, Reason: "already on the previous images and resources"}, nil
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
