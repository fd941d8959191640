package inplace

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/lru"
)

// Names other tools and tests rely on.
const (
	// StateAnnotation holds a pod's State as JSON.
	StateAnnotation = "inplace-rollout.io/state"
	// ReadinessGate is the pod condition used to drain a pod before its images change, when the
	// pod template declares it in spec.readinessGates.
	ReadinessGate corev1.PodConditionType = "inplace-rollout.io/ready"
)

// Stage is where a pod is in its in-place update.
type Stage string

// Stages, in the order an update and a revert go through them.
const (
	// StagePreparing: the state is recorded, but a container to change has no imageID yet;
	// the images are patched once it has one.
	StagePreparing Stage = "Preparing"
	// StagePreUpdateHook: the preUpdate hook runs (Hooks); the pod is drained and changed once
	// it ends.
	StagePreUpdateHook Stage = "PreUpdateHook"
	// StageDraining: the readiness gate is False; the images are patched after the grace period.
	StageDraining Stage = "Draining"
	// StageResizing: the containers' resources are changed through the pod's resize
	// subresource; waiting for the kubelet to apply them. The images, if any change, are patched
	// after.
	StageResizing Stage = "Resizing"
	// StageUpdating: the images are patched; waiting for the new containers to run and be ready.
	StageUpdating Stage = "Updating"
	// StagePostUpdateHook: every changed container runs its new image and the pod is Ready; the
	// postUpdate hook runs, and the pod counts as updated once it ends.
	StagePostUpdateHook Stage = "PostUpdateHook"
	// StageUpdated: every changed container runs its new image, Running and Ready through the soak.
	StageUpdated Stage = "Updated"
	// StageFailed: a changed container failed (reason says how); the pod waits for a revert.
	StageFailed Stage = "Failed"
	// StageRollingBack: the pod is going back to its before images.
	StageRollingBack Stage = "RollingBack"
	// StageRolledBack: every changed container runs its before image again.
	StageRolledBack Stage = "RolledBack"
)

// State is the per-pod record of an in-place update, kept in the StateAnnotation. It is the
// only memory of the update: everything needed to resume or revert is in it.
type State struct {
	RolloutID  string           `json:"rolloutID,omitempty"`
	Revision   string           `json:"revision,omitempty"`
	StartedAt  time.Time        `json:"startedAt"`
	Containers []ContainerState `json:"containers"`
	// Labels are pod labels set together with the images (a workload's revision label), with
	// the values a revert puts back; Annotations the same for annotations (those a workload's
	// template changed along with its images).
	Labels      map[string]LabelChange `json:"labels,omitempty"`
	Annotations map[string]LabelChange `json:"annotations,omitempty"`
	// Hooks are the rollout's hooks, recorded when the update starts so that a revert runs them
	// too; HookRuns each hook run on the pod, in either direction.
	Hooks    *Hooks    `json:"hooks,omitempty"`
	HookRuns []HookRun `json:"hookRuns,omitempty"`
	Stage    Stage     `json:"stage"`
	Reason   string    `json:"reason,omitempty"`
	// Failure is the code of a Failed stage's Reason; states written before it was recorded
	// have none (see FailureCode).
	Failure FailureCode `json:"failure,omitempty"`
	StageAt time.Time   `json:"stageAt"`
}

// stageTime is how the state records an instant. It keeps milliseconds: the grace period and
// the progress deadline are timed from StageAt, and a rollback orders pods by StartedAt, so
// rounding to the second would shorten the one and tie the other.
func stageTime(now time.Time) time.Time { return now.UTC().Truncate(time.Millisecond) }

// ContainerState records one container whose image changes.
type ContainerState struct {
	Name string `json:"name"`
	// Init is true for an init container.
	Init bool `json:"init,omitempty"`
	// BeforeImage and BeforeImageID are what the container ran before the update.
	BeforeImage   string `json:"beforeImage"`
	BeforeImageID string `json:"beforeImageID,omitempty"`
	// AfterImage is the target; AfterImageID what the kubelet reported once it ran.
	AfterImage   string `json:"afterImage"`
	AfterImageID string `json:"afterImageID,omitempty"`
	// FromImageID is the imageID the container ran when this update patched it, when that is
	// not BeforeImageID: a rollout that supersedes another keeps the last stable image as
	// BeforeImage while the pod already runs the superseded rollout's image.
	FromImageID string `json:"fromImageID,omitempty"`
	// RestartsBefore is the container's restart count before the update.
	RestartsBefore int32 `json:"restartsBefore"`
	// FailingBefore is the waiting reason of a container that was already failing before the
	// update (CrashLoopBackOff, ImagePullBackOff, ...), so a failure is not blamed on the new image.
	FailingBefore string `json:"failingBefore,omitempty"`
	// FromContainerID and FromRestarts are the container's containerID and restart count when
	// its image was last patched, by the update or by its revert. A status that still names
	// that container describes the instance the patch replaces, not one of the new image: the
	// kubelet keeps it in the status while it kills it, pulls, and waits out a crash back-off
	// that it keys by image and counts in-place starts toward; unless the kubelet kept it, as
	// stillReplaced tells. Empty in states written before this was recorded; they are judged
	// without it.
	FromContainerID string `json:"fromContainerID,omitempty"`
	FromRestarts    int32  `json:"fromRestarts,omitempty"`
	// RevertImage is the image a revert patches back: BeforeImage, or its digest form when the
	// tag may have moved since. Set when the revert starts.
	RevertImage string `json:"revertImage,omitempty"`
	// BeforeResources and AfterResources are the CPU and memory values the update changes on the
	// container, as they were and as they become; nil when its resources do not change.
	BeforeResources *Resources `json:"beforeResources,omitempty"`
	AfterResources  *Resources `json:"afterResources,omitempty"`
	// ResizeRestarts says the kubelet restarts the container to apply the resize: its
	// resizePolicy is RestartContainer for a resource that changes. The restart count may
	// climb by one more.
	ResizeRestarts bool `json:"resizeRestarts,omitempty"`
	// ResizeOnly says the update changes the container's resources and leaves its image:
	// AfterImage is BeforeImage, the image it runs, and a revert puts the resources back alone.
	ResizeOnly bool `json:"resizeOnly,omitempty"`
}

// imageChanges reports whether the update changes the container's image.
func (c *ContainerState) imageChanges() bool { return !c.ResizeOnly }

// resizes reports whether the update changes the container's resources.
func (c *ContainerState) resizes() bool { return c.AfterResources != nil }

// expectedRestarts is how many restarts the update causes: one for a new image, one for a resize
// the container's policy restarts it for.
func (c *ContainerState) expectedRestarts() int32 {
	n := c.resizeRestarts()
	if c.imageChanges() {
		n++
	}
	return n
}

// resizeRestarts is the restarts the resize alone causes the container.
func (c *ContainerState) resizeRestarts() int32 {
	if c.ResizeRestarts {
		return 1
	}
	return 0
}

// targetResources are the resources the container goes to: after, or before when reverting;
// nil when they do not change.
func (c *ContainerState) targetResources(reverting bool) *Resources {
	if reverting {
		return c.BeforeResources
	}
	return c.AfterResources
}

// LabelChange is one label or annotation set with the images. An empty Before means the key was
// absent; an empty After, that the update removes it.
type LabelChange struct {
	Before string `json:"before,omitempty"`
	After  string `json:"after"`
}

// ReadState returns the pod's state, or nil when it has none. An annotation that does not
// decode is a *StateError.
func ReadState(pod *corev1.Pod) (*State, error) {
	raw, ok := pod.Annotations[StateAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	if cached, ok := decoded.Get(raw); ok {
		// Its text passed every check but the pod's own: which containers the pod has.
		s := cached.(*State)
		if err := s.checkContainersOf(pod); err != nil {
			return nil, &StateError{Namespace: pod.Namespace, Pod: pod.Name, Err: err, Shape: true}
		}
		return s.clone(), nil
	}
	var s State
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, &StateError{Namespace: pod.Namespace, Pod: pod.Name, Err: err}
	}
	if err := s.check(pod); err != nil {
		return nil, &StateError{Namespace: pod.Namespace, Pod: pod.Name, Err: err, Shape: true}
	}
	decoded.Add(raw, s.clone())
	return &s, nil
}

// decoded holds the states ReadState decoded and checked, by annotation text: every step reads
// the state of every pod it looks at, and the text of most of them has not changed since the
// last step. Decoding and parsing each image reference again was most of a step's CPU at
// 1,000 pods. It keeps only states whose text is valid, and is bounded, least recently used
// first out; an entry is never handed out, only a clone of it.
var decoded = lru.New(decodedStates)

// decodedStates is the size of ReadState's cache: the pods of a few rollouts of thousands.
const decodedStates = 20000

// checkContainersOf is the one part of check that depends on more than the annotation's text:
// that the pod has each container the state names. On a state whose text passed check, it
// returns the error check would.
func (s *State) checkContainersOf(pod *corev1.Pod) error {
	for i, c := range s.Containers {
		if containerSpec(pod, c.Name, c.Init) == nil {
			return missingContainer(i, c)
		}
	}
	return nil
}

// missingContainer is the error of the state's i-th container c, which the pod does not have.
func missingContainer(i int, c ContainerState) error {
	kind := "container"
	if c.Init {
		kind = "init container"
	}
	return fmt.Errorf("containers[%d]: the pod has no %s %q", i, kind, truncate(c.Name, 64))
}

// StateError is a pod's state annotation that cannot be read: someone edited it by hand. No
// retry fixes it, so callers stop and say which pod.
type StateError struct {
	Namespace, Pod string
	Err            error
	// Shape says the annotation is JSON, but not a state this version writes (Err names the
	// field); otherwise it is not JSON at all.
	Shape bool
}

func (e *StateError) Error() string {
	if e.Shape {
		return fmt.Sprintf("pod %s/%s: annotation %s is not a state this version writes: %v", e.Namespace, e.Pod, StateAnnotation, e.Err)
	}
	return fmt.Sprintf("pod %s/%s: annotation %s is not valid JSON: %v", e.Namespace, e.Pod, StateAnnotation, e.Err)
}

// check refuses a decoded state that no version writes on this pod: an unknown stage, a
// container the pod does not have (or listed twice), a negative restart count, an image that
// is not a reference. Acting on one could patch the wrong container or a made-up image back.
func (s *State) check(pod *corev1.Pod) error {
	if !s.Stage.Known() {
		return fmt.Errorf("stage %q is none of %s", truncate(string(s.Stage), 64), joinNames(knownStages))
	}
	if s.Failure != "" && !s.Failure.Known() {
		return fmt.Errorf("failure %q is none of %s", truncate(string(s.Failure), 64), joinNames(knownFailures))
	}
	if err := CheckHooks("hooks", s.Hooks); err != nil {
		return err
	}
	for i, r := range s.HookRuns {
		if s.Hooks.hook(r.Hook) == nil {
			return fmt.Errorf("hookRuns[%d]: hook %q is not one of the state's hooks", i, truncate(string(r.Hook), 64))
		}
	}
	seen := make(map[string]bool, len(s.Containers))
	for i, c := range s.Containers {
		field := fmt.Sprintf("containers[%d]", i)
		switch {
		case c.Name == "":
			return fmt.Errorf("%s has no name", field)
		case containerSpec(pod, c.Name, c.Init) == nil:
			return missingContainer(i, c)
		case seen[c.Name]:
			return fmt.Errorf("%s: container %q is listed twice", field, c.Name)
		case c.RestartsBefore < 0:
			return fmt.Errorf("%s.restartsBefore is %d, below 0", field, c.RestartsBefore)
		case c.FromRestarts < 0:
			return fmt.Errorf("%s.fromRestarts is %d, below 0", field, c.FromRestarts)
		case (c.BeforeResources == nil) != (c.AfterResources == nil):
			return fmt.Errorf("%s has only one of beforeResources and afterResources", field)
		case c.ResizeOnly && (c.AfterResources == nil || c.BeforeImage != c.AfterImage):
			return fmt.Errorf("%s.resizeOnly without afterResources, or with two images", field)
		}
		seen[c.Name] = true
		for _, f := range []struct{ name, img string }{{"beforeImage", c.BeforeImage}, {"afterImage", c.AfterImage}, {"revertImage", c.RevertImage}} {
			if f.img == "" && f.name == "revertImage" {
				continue
			}
			if _, err := reference.ParseAnyReference(f.img); err != nil || strings.TrimSpace(f.img) != f.img {
				return fmt.Errorf("%s.%s %q is not an image reference", field, f.name, truncate(f.img, 128))
			}
		}
	}
	if _, ok := s.Annotations[StateAnnotation]; ok {
		// A revert would overwrite the record it reverts by.
		return fmt.Errorf("annotations names %s, the state itself", StateAnnotation)
	}
	return nil
}

// truncate keeps a hand-edited value short enough for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (e *StateError) Unwrap() error { return e.Err }

func (s *State) encode() string {
	data, err := json.Marshal(s)
	if err != nil {
		// State holds only strings, numbers and times.
		panic(fmt.Sprintf("encoding in-place state: %v", err))
	}
	return string(data)
}

func (s *State) container(name string) *ContainerState {
	for i := range s.Containers {
		if s.Containers[i].Name == name {
			return &s.Containers[i]
		}
	}
	return nil
}

// markPatched records in st, for each container whose spec image the patch about to be written
// changes (to AfterImage, or to RevertImage when reverting), the containerID and restart count
// the pod reports now: the instance the patch replaces. A container whose spec already carries
// its target keeps what was recorded when it was patched.
func (s *State) markPatched(pod *corev1.Pod, reverting bool) {
	for i := range s.Containers {
		c := &s.Containers[i]
		target := c.AfterImage
		if reverting {
			target = c.RevertImage
		}
		if spec := containerSpec(pod, c.Name, c.Init); spec == nil || spec.Image == target || !c.imageChanges() {
			continue
		}
		c.FromContainerID, c.FromRestarts = "", 0
		if cs := containerStatus(pod, c.Name, c.Init); cs != nil {
			c.FromContainerID, c.FromRestarts = cs.ContainerID, cs.RestartCount
		}
	}
}

// moveTo moves the state to stage, entered now, with why. failure is the code of a Failed stage:
// no other stage keeps one.
func (s *State) moveTo(stage Stage, now time.Time, reason string, failure FailureCode) {
	s.Stage, s.StageAt, s.Reason, s.Failure = stage, stageTime(now), reason, failure
}

func (s *State) clone() *State {
	c := *s
	c.Containers = append([]ContainerState(nil), s.Containers...)
	c.Labels, c.Annotations = maps.Clone(s.Labels), maps.Clone(s.Annotations)
	c.HookRuns = slices.Clone(s.HookRuns)
	return &c
}

// Known reports whether the stage is one this version writes; anything else was written by hand
// or by another tool.
func (s Stage) Known() bool { return slices.Contains(knownStages, s) }

// knownStages are the stages this version writes, in the order an update and a revert go
// through them.
var knownStages = []Stage{StagePreparing, StagePreUpdateHook, StageDraining, StageResizing, StageUpdating,
	StagePostUpdateHook, StageUpdated, StageFailed, StageRollingBack, StageRolledBack}

// joinNames lists stages or failure codes for a message.
func joinNames[T ~string](values []T) string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}

// Terminal reports whether the stage needs no further step from the updater.
func (s Stage) Terminal() bool {
	return s == StageUpdated || s == StageFailed || s == StageRolledBack
}

// metaAt reports whether the pod carries every label and annotation st sets with the images at
// its value before the update (before) or after it.
func (s *State) metaAt(pod *corev1.Pod, before bool) bool {
	at := func(l LabelChange) string {
		if before {
			return l.Before
		}
		return l.After
	}
	for k, l := range s.Labels {
		if pod.Labels[k] != at(l) {
			return false
		}
	}
	for k, l := range s.Annotations {
		if pod.Annotations[k] != at(l) {
			return false
		}
	}
	return true
}
