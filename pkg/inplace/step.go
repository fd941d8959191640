package inplace

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Options tune the update of one pod.
type Options struct {
	// GracePeriod is the wait between setting the readiness gate False and patching the images,
	// so endpoints stop sending traffic first. Used only when the pod declares the gate.
	GracePeriod time.Duration
	// Soak is how long a new container must stay Running and Ready, without restarting, before
	// the update counts as done.
	Soak time.Duration
	// ProgressDeadline fails an update or revert that makes no progress for this long [10m].
	ProgressDeadline time.Duration
	// RevertImages, when set, are the images a revert may put back, by container (see
	// CheckRevert): a state edited to name any other image is refused instead of followed.
	RevertImages map[string][]string
}

// DefaultProgressDeadline applies when Options.ProgressDeadline is zero.
const DefaultProgressDeadline = 10 * time.Minute

func (o Options) withDefaults() Options {
	if o.ProgressDeadline <= 0 {
		o.ProgressDeadline = DefaultProgressDeadline
	}
	return o
}

// Step is the next write for a pod, computed from the pod alone. At most one write per step.
type Step struct {
	// Patch is a strategic-merge patch carrying the resourceVersion it was computed from, for
	// the pod itself or, when Subresource is "status", its status subresource. Nil: no write.
	Patch       []byte
	Subresource string
	// Stage is the pod's stage once the patch (if any) is written; Reason explains it.
	Stage  Stage
	Reason string
	// Done means no further step is needed: the pod reached a terminal stage, or there was
	// nothing to do.
	Done bool
	// RequeueAfter is when to compute the next step, when not Done.
	RequeueAfter time.Duration
	// Event is recorded on the pod once the patch is written.
	Event *Event
	// Call is an HTTP hook to call once the patch, which records its start, is written; its
	// answer decides the next step.
	Call *HookCall
}

// Event is a Kubernetes Event about the pod.
type Event struct {
	Type, Reason, Message string
	// Related is a second object the Event is about, if any: the first pod of a batch that an
	// Event on its workload announces, which also keeps the Events of two batches apart.
	Related *corev1.ObjectReference
}

// Event reasons.
const (
	EventUpdating       = "InPlaceUpdating"
	EventUpdated        = "InPlaceUpdated"
	EventUpdateFailed   = "InPlaceUpdateFailed"
	EventRollingBack    = "InPlaceRollingBack"
	EventRolledBack     = "InPlaceRolledBack"
	EventRollbackFailed = "InPlaceRollbackFailed"
	EventHook           = "InPlaceHook"
)

// patchBuilder assembles one strategic-merge patch.
type patchBuilder struct {
	pod         *corev1.Pod
	annotations map[string]any
	labels      map[string]any
	containers  []map[string]any
	inits       []map[string]any
	conditions  []corev1.PodCondition
	status      bool
}

func newPatch(pod *corev1.Pod) *patchBuilder { return &patchBuilder{pod: pod} }

func (b *patchBuilder) state(st *State) *patchBuilder {
	b.annotations = map[string]any{StateAnnotation: st.encode()}
	return b
}

// patchImages patches the containers to st's targets (AfterImage; RevertImage when reverting)
// and the labels to their after (before) values, and writes st recording, for each container
// the patch changes, the instance it replaces (markPatched): one write, so the state always
// names the container a patch replaced.
func (b *patchBuilder) patchImages(st *State, reverting bool) *patchBuilder {
	st.markPatched(b.pod, reverting)
	b.state(st)
	for _, c := range st.Containers {
		if !c.imageChanges() {
			continue // resized only: its resources go through the resize subresource
		}
		img := c.AfterImage
		if reverting {
			img = c.RevertImage
		}
		b.image(c.Name, c.Init, img)
	}
	for k, l := range st.Labels {
		if reverting {
			b.label(k, l.Before)
		} else {
			b.label(k, l.After)
		}
	}
	for k, l := range st.Annotations {
		if reverting {
			b.annotation(k, l.Before)
		} else {
			b.annotation(k, l.After)
		}
	}
	return b
}

func (b *patchBuilder) clearState() *patchBuilder {
	b.annotations = map[string]any{StateAnnotation: nil}
	return b
}

func (b *patchBuilder) label(key, value string) *patchBuilder {
	if b.labels == nil {
		b.labels = map[string]any{}
	}
	if value == "" {
		b.labels[key] = nil
	} else {
		b.labels[key] = value
	}
	return b
}

// annotation sets an annotation, or removes it when value is empty. Never the state's own
// (Diff refuses a target that names it, and ReadState a state).
func (b *patchBuilder) annotation(key, value string) *patchBuilder {
	if b.annotations == nil {
		b.annotations = map[string]any{}
	}
	if value == "" {
		b.annotations[key] = nil
	} else {
		b.annotations[key] = value
	}
	return b
}

func (b *patchBuilder) image(name string, init bool, image string) *patchBuilder {
	entry := map[string]any{"name": name, "image": image}
	if init {
		b.inits = append(b.inits, entry)
	} else {
		b.containers = append(b.containers, entry)
	}
	return b
}

// gate sets the readiness gate condition through the status subresource. Setting it False also
// sets Ready False, so endpoints drop the pod now rather than at the kubelet's next sync; the
// kubelet alone sets Ready back to True.
func (b *patchBuilder) gate(status corev1.ConditionStatus, reason string, now time.Time) *patchBuilder {
	b.status = true
	b.conditions = append(b.conditions, b.condition(ReadinessGate, status, reason, now))
	if status == corev1.ConditionFalse {
		b.conditions = append(b.conditions, b.condition(corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady", now))
	}
	return b
}

func (b *patchBuilder) condition(t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now time.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: status, Reason: reason}
	c.LastTransitionTime.Time = now.Truncate(time.Second)
	for _, old := range b.pod.Status.Conditions {
		if old.Type == t && old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return c
}

// build encodes the patch. The resourceVersion makes the write fail with a conflict if the pod
// changed since it was read, so no decision is ever applied to a pod it was not made for.
// Annotations written through the status subresource are kept by the apiserver (the pod status
// strategy resets only the spec), which lets a state change and its gate change be one write.
func (b *patchBuilder) build() []byte {
	meta := map[string]any{"resourceVersion": b.pod.ResourceVersion, "uid": string(b.pod.UID)}
	if b.annotations != nil {
		meta["annotations"] = b.annotations
	}
	if b.labels != nil {
		meta["labels"] = b.labels
	}
	body := map[string]any{"metadata": meta}
	spec := map[string]any{}
	if len(b.containers) > 0 {
		spec["containers"] = b.containers
	}
	if len(b.inits) > 0 {
		spec["initContainers"] = b.inits
	}
	if len(spec) > 0 {
		body["spec"] = spec
	}
	if len(b.conditions) > 0 {
		body["status"] = map[string]any{"conditions": b.conditions}
	}
	data, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("encoding pod patch: %v", err))
	}
	return data
}

func (b *patchBuilder) step(st Stage, reason string) Step {
	s := Step{Patch: b.build(), Stage: st, Reason: reason}
	if b.status {
		s.Subresource = "status"
	}
	return s
}

func wait(st *State, after time.Duration, reason string) Step {
	return Step{Stage: st.Stage, Reason: reason, RequeueAfter: after}
}
