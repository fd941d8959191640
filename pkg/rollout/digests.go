package rollout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// EventTagContentDiffers is the reason of the Warning Event a rollout records when it starts
// while pods run one of its target tags as different content.
const EventTagContentDiffers = "TagContentDiffers"

// tagDigests are, for each target image given by tag, the digests the pods that run that tag
// report, with how many pods run each. Targets pinned by digest are left out: their content
// cannot change under them.
type tagDigests map[string]map[string]int // container -> digest -> pods

// observeTagDigests reads the digests the kubelet reports for the containers that run a target
// tag.
func observeTagDigests(pods []*corev1.Pod, images map[string]string) tagDigests {
	out := tagDigests{}
	for _, p := range pods {
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				target, ok := images[c.Name]
				if !ok || inplace.DigestOf(target) != "" || !inplace.SameImage(target, c.Image) {
					continue
				}
				digest := digestReported(p, c.Name)
				if digest == "" {
					continue
				}
				if out[c.Name] == nil {
					out[c.Name] = map[string]int{}
				}
				out[c.Name][digest]++
			}
		}
	}
	return out
}

func digestReported(p *corev1.Pod, container string) string {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.Name == container {
				return inplace.DigestOf(cs.ImageID)
			}
		}
	}
	return ""
}

// describe says which digests the pods run each target tag as, e.g. `app=reg/app:v2 as
// sha256:1a2b... (3 pods)`, containers in name order.
func (t tagDigests) describe(images map[string]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(t)) {
		parts = append(parts, fmt.Sprintf("%s=%s as %s", name, images[name], describeDigests(t[name])))
	}
	return strings.Join(parts, "; ")
}

// describeDigests says each digest with its pod count, e.g. `sha256:1a2b... (3 pods) and
// sha256:3c4d... (1 pods)`, digests in order.
func describeDigests(counts map[string]int) string {
	var ds []string
	for _, d := range slices.Sorted(maps.Keys(counts)) {
		ds = append(ds, fmt.Sprintf("%s (%d pods)", d, counts[d]))
	}
	return strings.Join(ds, " and ")
}

// split lists the containers whose target tag runs under more than one digest across the pods:
// the tag was pushed again between two pulls, so the pods run different content under one name.
func (t tagDigests) split() []string {
	var names []string
	for _, name := range slices.Sorted(maps.Keys(t)) {
		if len(t[name]) > 1 {
			names = append(names, name)
		}
	}
	return names
}

// alreadyThere is the message for a workload whose pods all run the target images already.
// When a target is a tag, it says which content the pods run under it, that a tag pushed again
// would not restart them, and that a target given by digest would.
func alreadyThere(what string, pods []*corev1.Pod, images map[string]string) string {
	msg := fmt.Sprintf("%s already runs these images; nothing to do", what)
	tags := observeTagDigests(pods, images)
	if len(tags) == 0 {
		return msg
	}
	msg += fmt.Sprintf(". Its pods run %s. A tag pushed again with new content does not restart them: to roll out new content under the same tag, give the image by digest (IMAGE@sha256:...)", tags.describe(images))
	if split := tags.split(); len(split) > 0 {
		msg += fmt.Sprintf(". Warning: the pods run different content under one tag for container %s", strings.Join(split, ", "))
	}
	return msg
}

// warnTagDigests warns that pods run a target tag as different content, which a rollout to
// that tag leaves as it is: in the log and in one Warning Event, on the first pod that runs such
// a tag. The Event is a notice: failing to record it is logged, and the rollout goes on.
func (e *Engine) warnTagDigests(ctx context.Context, ref workload.Ref, id string, pods []*corev1.Pod, tags tagDigests, images map[string]string) {
	what := tags.describe(images)
	log := e.logFor(ref, id)
	log.Warn("pods run one target tag as different content: the tag was pushed again between pulls", "digests", what)
	if e.Events == nil {
		return
	}
	split := tags.split()
	for _, p := range pods {
		if !slices.ContainsFunc(split, func(name string) bool { return runsTag(p, name, images[name]) }) {
			continue
		}
		ev := inplace.Event{Type: corev1.EventTypeWarning, Reason: EventTagContentDiffers, Message: fmt.Sprintf(
			"pods of %s run one target tag as different content (the tag was pushed again between pulls): %s; a rollout to the tag does not restart the pods already on it: give the image by digest (IMAGE@sha256:...) to run one content on every pod", ref, what)}
		if err := e.Events.Record(ctx, inplace.PodRef(p), ev); err != nil {
			log.Warn("recording an Event", "err", err)
		}
		return
	}
}

// runsTag reports whether the pod's container name runs tag, with a digest reported.
func runsTag(p *corev1.Pod, name, tag string) bool {
	return runsImage(p, name, tag) && digestReported(p, name) != ""
}
