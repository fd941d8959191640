package inplace

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// pullReasons are failures that happen before a container of the new image exists.
var pullReasons = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true}

// failingReason returns the container's waiting reason when it is a failure (or a first failed
// pull), else "".
func failingReason(cs *corev1.ContainerStatus) string {
	if cs != nil && cs.State.Waiting != nil && (waitingFailures[cs.State.Waiting.Reason] != "" || cs.State.Waiting.Reason == "ErrImagePull") {
		return cs.State.Waiting.Reason
	}
	return ""
}

// failingBeforeReason is failingReason for a container about to be updated, which also counts a
// crash loop caught between two crashes: started again, not Ready yet, its last instance
// exited with an error. A kubelet shows that state for a moment in every turn of the loop, and
// the update must not then take the loop for the new image's fault.
func failingBeforeReason(cs *corev1.ContainerStatus) string {
	if reason := failingReason(cs); reason != "" {
		return reason
	}
	if cs == nil || cs.Ready || cs.RestartCount == 0 {
		return ""
	}
	if last := cs.LastTerminationState.Terminated; last != nil && last.ExitCode != 0 {
		return "CrashLoopBackOff"
	}
	if cur := cs.State.Terminated; cur != nil && cur.ExitCode != 0 {
		return "CrashLoopBackOff"
	}
	return ""
}

// Progress is how far the containers of a state are toward their target images.
type Progress struct {
	// Done: every container runs its target, Running and Ready (or back on its failing image
	// for a revert of a container that was failing before), through the soak.
	Done bool
	// Failed: a container will not get there; Reason says which and why, Code how.
	Failed bool
	Reason string
	Code   FailureCode
	// ImageIDs are the imageIDs the containers report, by name, once Done.
	ImageIDs map[string]string
	// Unhealthy, when Done, says which containers run their target but still fail as they
	// already did before the update: reported, not blamed on the new image.
	Unhealthy string
	// OpenGate: every container runs its target, Running and Ready, through the soak, and the
	// pod's readiness gate is not True yet. The kubelet sets the pod Ready only once the gate
	// is True, so the engine sets it True next, and the pod is Done once Ready follows.
	OpenGate bool
	// RequeueAfter is when to look again while neither Done nor Failed.
	RequeueAfter time.Duration
}

// pollInterval is how often a pending container is looked at again when nothing else is due.
const pollInterval = 200 * time.Millisecond

// Refresh judges a pod's progress toward the target of its state: the after images during an
// update, the revert images during a rollback. It reads only the pod and writes nothing.
func Refresh(pod *corev1.Pod, st *State, opts Options, now time.Time) Progress {
	opts = opts.withDefaults()
	// A kubelet that writes status.observedGeneration (v1.34, KEP-5067) says which spec its
	// status describes: a status older than the pod's generation predates the last patch, so
	// it can neither complete nor fail the update; only the progress deadline still runs.
	if og := pod.Status.ObservedGeneration; og != 0 && og < pod.Generation {
		return pending(pod, Progress{}, []string{fmt.Sprintf("the pod's status describes generation %d, not yet %d", og, pod.Generation)}, false, st, opts, now)
	}
	reverting := st.Stage == StageRollingBack
	p := Progress{Done: true, ImageIDs: map[string]string{}}
	var waits, unhealthy []string
	// soaking: every container not done yet runs its target and only waits out the soak, which
	// is progress, so the progress deadline does not apply.
	soaking := true
	// podCanBeReady: no container is done while failing as before, and every container the
	// update leaves alone is ready, so the pod's Ready condition is required too; a pod kept
	// unready by a container the update did not touch is not the new images' failure.
	podCanBeReady := othersReady(pod, st)
	for i := range st.Containers {
		c := &st.Containers[i]
		v := judgeContainer(pod, c, reverting, opts.Soak, now)
		switch {
		case v.failed != "":
			return Progress{Failed: true, Reason: v.failed, Code: v.code}
		case !v.done:
			p.Done = false
			soaking = soaking && v.after > 0
			waits = append(waits, v.waiting)
			if v.after > 0 && (p.RequeueAfter == 0 || v.after < p.RequeueAfter) {
				p.RequeueAfter = v.after
			}
		default:
			p.ImageIDs[c.Name] = v.imageID
			podCanBeReady = podCanBeReady && v.unhealthy == "" && !v.failingDone
			if v.unhealthy != "" {
				unhealthy = append(unhealthy, v.unhealthy)
			}
		}
	}
	if p.Done {
		// The containers are done; the pod must be Ready too, the kubelet's own verdict over
		// every container and readiness gate, as a Service sees it. With the gate, Ready can
		// only follow once the engine has set the gate True.
		switch {
		case hasReadinessGate(pod) && !gateTrue(pod):
			return Progress{OpenGate: true, ImageIDs: p.ImageIDs, Unhealthy: strings.Join(unhealthy, "; "),
				Reason: fmt.Sprintf("containers ready; readiness gate %s True, waiting for the pod's Ready condition", ReadinessGate), RequeueAfter: pollInterval}
		case podCanBeReady && !PodReady(pod):
			return pending(pod, Progress{}, []string{"containers ready, the pod's Ready condition not True yet"}, false, st, opts, now)
		}
		p.Unhealthy = strings.Join(unhealthy, "; ")
		return p
	}
	return pending(pod, p, waits, soaking, st, opts, now)
}

// othersReady reports whether every container of the pod that st does not list is ready, or
// is an init container that ran to completion.
func othersReady(pod *corev1.Pod, st *State) bool {
	for _, set := range []struct {
		statuses []corev1.ContainerStatus
		init     bool
	}{{pod.Status.ContainerStatuses, false}, {pod.Status.InitContainerStatuses, true}} {
		for _, cs := range set.statuses {
			if c := st.container(cs.Name); c != nil && c.Init == set.init {
				continue
			}
			if spec := containerSpec(pod, cs.Name, set.init); set.init && (spec == nil || !NativeSidecar(*spec)) {
				continue
			}
			if !cs.Ready {
				return false
			}
		}
	}
	return true
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool { return conditionTrue(pod, corev1.PodReady) }

// gateTrue reports whether the pod's readiness gate condition is True.
func gateTrue(pod *corev1.Pod) bool { return conditionTrue(pod, ReadinessGate) }

func conditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	c := podCondition(pod, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// progressDeadline is how long a stage may go without progress on this pod: opts'
// ProgressDeadline, plus the pod's termination grace period. An image change first runs the old
// container's preStop hook and waits up to that grace period for it to exit, before the new
// image is even pulled; that wait is the pod's own, not a lack of progress.
func progressDeadline(pod *corev1.Pod, opts Options) time.Duration {
	d := opts.ProgressDeadline
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g > 0 {
		d += time.Duration(*g) * time.Second
	}
	return d
}

// pending is the progress of a pod not done yet: failed once the progress deadline has passed
// without progress (soaking is progress), else waiting for the reasons in waits.
func pending(pod *corev1.Pod, p Progress, waits []string, soaking bool, st *State, opts Options, now time.Time) Progress {
	p.Done, p.ImageIDs = false, nil
	deadline := progressDeadline(pod, opts)
	if left := progressSince(pod, st).Add(deadline).Sub(now); !soaking && left <= 0 {
		return Progress{Failed: true, Code: FailureDeadlineExceeded,
			Reason: fmt.Sprintf("ProgressDeadlineExceeded: no progress within %s: %s", deadline, strings.Join(waits, "; "))}
	} else if left > 0 && (p.RequeueAfter == 0 || left < p.RequeueAfter) {
		p.RequeueAfter = left
	}
	if p.RequeueAfter <= 0 || p.RequeueAfter > pollInterval {
		p.RequeueAfter = pollInterval
	}
	p.Reason = strings.Join(waits, "; ")
	return p
}

// progressSince is when the pod last showed progress toward the target of st: the stage was
// entered, a changed container's running instance started, or the pod's Ready condition
// turned. An update without the readiness gate has no end written, so a pod that ran its new
// images Ready and turns unready later is judged pending again: its deadline runs from that
// turn, not from the image patch long before.
func progressSince(pod *corev1.Pod, st *State) time.Time {
	t := st.StageAt
	for _, c := range st.Containers {
		if cs := containerStatus(pod, c.Name, c.Init); cs != nil && cs.State.Running != nil && cs.State.Running.StartedAt.After(t) {
			t = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}

// verdict is the judgement of one container.
type verdict struct {
	done    bool
	imageID string
	// failed says why the container failed, code as a code.
	failed  string
	code    FailureCode
	waiting string
	after   time.Duration // soak left
	// unhealthy: done, though the container fails on its target as it failed before the update.
	unhealthy string
	// failingDone: done while not Running and Ready (it fails as it did before the update), so
	// the pod's Ready condition cannot be required of it.
	failingDone bool
}

func judgeContainer(pod *corev1.Pod, c *ContainerState, reverting bool, soak time.Duration, now time.Time) verdict {
	target := c.AfterImage
	if reverting {
		target = c.RevertImage
	}
	spec := containerSpec(pod, c.Name, c.Init)
	cs := containerStatus(pod, c.Name, c.Init)
	if spec == nil {
		return verdict{failed: fmt.Sprintf("container %q is gone from the pod spec", c.Name), code: FailureContainerGone}
	}
	if spec.Image != target {
		return verdict{waiting: fmt.Sprintf("container %q: spec image is %s, not yet %s", c.Name, spec.Image, target)}
	}
	// A completed init container is not re-run on an image change; the new image applies the
	// next time the pod starts. Sidecars (restartable init containers) restart like others.
	if c.Init && !NativeSidecar(*spec) {
		return verdict{done: true}
	}
	if cs == nil {
		return verdict{waiting: fmt.Sprintf("container %q has no status", c.Name)}
	}
	if wait := c.resizeUnapplied(cs, reverting); wait != "" {
		return verdict{waiting: wait}
	}
	if !c.imageChanges() {
		return c.judgeResized(cs, reverting)
	}
	onTarget := c.onTarget(cs, target, reverting)
	if reason := failingReason(cs); reason != "" {
		return c.judgeFailing(cs, reason, target, reverting, onTarget)
	}
	if c.stillReplaced(pod, cs, target) {
		// The kubelet reports the replaced container, even Running and Ready, for a while
		// after the patch; its imageID may well be the target's in a revert.
		return verdict{waiting: fmt.Sprintf("container %q: still the container from before the patch (%s)", c.Name, cs.Image)}
	}
	if !onTarget {
		return verdict{waiting: fmt.Sprintf("container %q: still running %s", c.Name, cs.Image)}
	}
	if cs.State.Running == nil || !cs.Ready {
		if !reverting && c.FailingBefore != "" && cs.RestartCount > c.RestartsBefore+c.expectedRestarts() {
			// Between two crashes of the same loop as before the update.
			return verdict{done: true, imageID: cs.ImageID, unhealthy: failingAsBefore(restartsClimbed(c, cs), c)}
		}
		return verdict{waiting: fmt.Sprintf("container %q: on %s, not Running and Ready yet", c.Name, target)}
	}
	if !reverting && c.FailingBefore == "" && cs.RestartCount > c.RestartsBefore+c.expectedRestarts() {
		return verdict{failed: restartsClimbed(c, cs), code: FailureRestartClimb}
	}
	if left := cs.State.Running.StartedAt.Add(soak).Sub(now); left > 0 {
		return verdict{waiting: fmt.Sprintf("container %q: soaking, %s left", c.Name, left.Round(time.Second)), after: left}
	}
	return verdict{done: true, imageID: cs.ImageID}
}

// judgeResized judges a container whose image the update leaves alone and whose resources the
// status already reports at their target: done once Running and Ready, with no restart beyond
// the one its resize policy may cause. It starts no new instance to soak.
func (c *ContainerState) judgeResized(cs *corev1.ContainerStatus, reverting bool) verdict {
	if reason := failingReason(cs); reason != "" {
		if c.FailingBefore != "" {
			return verdict{done: true, imageID: cs.ImageID, failingDone: true, unhealthy: failingAsBefore(reason, c)}
		}
		if code := waitingFailures[reason]; code != "" {
			return verdict{failed: fmt.Sprintf("%s: container %q: %s", reason, c.Name, cs.State.Waiting.Message), code: code}
		}
	}
	if !reverting && c.FailingBefore == "" && cs.RestartCount > c.RestartsBefore+c.expectedRestarts() {
		return verdict{failed: restartsClimbed(c, cs), code: FailureRestartClimb}
	}
	if cs.State.Running == nil || !cs.Ready {
		return verdict{waiting: fmt.Sprintf("container %q: resized, not Running and Ready yet", c.Name)}
	}
	return verdict{done: true, imageID: cs.ImageID}
}

// stillReplaced reports whether cs describes the instance that the container's last image patch
// replaces (FromContainerID), so that the kubelet has not acted on the patch yet.
//
// Unless the kubelet kept that instance: it syncs a pod with the newest spec it has read, so a
// patch back to the very image reference the container was started from, written before the
// kubelet acted on the patch before it (a revert right after its update, a rollout superseded
// by one back to the running image), leaves the container running and no other instance comes.
// The status shows it once it reports the pod's generation, which the kubelet reports only from
// a sync that read that spec, never while it still stops a container for an older one
// (docs/conformance.md), with the same container running target, not restarted since.
func (c *ContainerState) stillReplaced(pod *corev1.Pod, cs *corev1.ContainerStatus, target string) bool {
	if c.FromContainerID == "" || cs.ContainerID != c.FromContainerID {
		return false
	}
	kept := pod.Generation > 0 && pod.Status.ObservedGeneration >= pod.Generation &&
		cs.State.Running != nil && cs.RestartCount == c.FromRestarts && c.startedFrom(cs, target)
	return !kept
}

// startedFrom reports whether the running container cs was started from the image reference
// target, the string the kubelet compares with the spec's to decide on a restart.
//
// The status names the reference the container was started from, except that containerd 1.6
// names an image by its first tag on the node when it has one: a container started from
// REPO:TAG@DIGEST reports REPO:TAG, as does one started from REPO:TAG, which a spec naming
// REPO:TAG@DIGEST restarts (docs/conformance.md). That form is taken only for a target that is
// BeforeImage, the reference the container from before the update was started from: a revert,
// or a rollout that supersedes another and returns to the image from before it. Any other
// container the patch replaces runs a later rollout's image, and its digest tells it apart.
func (c *ContainerState) startedFrom(cs *corev1.ContainerStatus, target string) bool {
	if cs.Image == target {
		return true
	}
	return target == c.BeforeImage && reportsByTag(cs, target)
}

// reportsByTag reports whether cs names the pinned reference target (REPO:TAG@DIGEST) the way
// containerd 1.6 does: by REPO:TAG, with an imageID of DIGEST (docs/conformance.md).
func reportsByTag(cs *corev1.ContainerStatus, target string) bool {
	tagged, digest, ok := strings.Cut(target, "@")
	return ok && cs.Image == tagged && digestOf(cs.ImageID) == digest
}

// onTarget reports whether the container status describes the container's target image.
func (c *ContainerState) onTarget(cs *corev1.ContainerStatus, target string, reverting bool) bool {
	if reverting {
		// Back on the exact image it ran before: the recorded digest when there is one.
		if c.BeforeImageID != "" && digestOf(c.BeforeImageID) != "" {
			return digestOf(cs.ImageID) == digestOf(c.BeforeImageID)
		}
		return cs.ImageID != "" && SameImage(cs.Image, target)
	}
	// The runtime may report another name for the image (two tags, one digest), so a new
	// imageID also counts; and so does a pinned target reported by its tag, whose digest may be
	// the one the container ran before (a rollout superseding another back to the image from
	// before it, or a retag of the running image).
	return cs.ImageID != "" && (SameImage(cs.Image, target) || cs.ImageID != c.fromImageID() ||
		reportsByTag(cs, target))
}

// judgeFailing judges a container the kubelet reports failing with reason (failingReason): a
// wait, a failure, or done while failing as it did before the update.
func (c *ContainerState) judgeFailing(cs *corev1.ContainerStatus, reason, target string, reverting, onTarget bool) verdict {
	if reason == "CrashLoopBackOff" && c.FailingBefore == "" && c.startBackOff(cs) {
		// No container of the target has run: the kubelet waits out a crash back-off keyed by
		// pod, container and image, to which every in-place start counts, before it starts
		// the target at all. That is a wait, bounded by the progress deadline.
		return verdict{waiting: fmt.Sprintf("container %q: the kubelet backs off before starting %s, no container of it has run yet: %s", c.Name, target, cs.State.Waiting.Message)}
	}
	if reason == "ErrImagePull" {
		return verdict{waiting: fmt.Sprintf("container %q: %s: %s", c.Name, reason, cs.State.Waiting.Message)}
	}
	msg := fmt.Sprintf("%s: container %q: %s", reason, c.Name, cs.State.Waiting.Message)
	if last := cs.LastTerminationState.Terminated; reason == "CrashLoopBackOff" && last != nil {
		msg += fmt.Sprintf(" (last exit: %s, code %d)", last.Reason, last.ExitCode)
	}
	code := waitingFailures[reason]
	switch {
	case reverting && c.FailingBefore != "" && onTarget:
		// It was failing before the update and is back where it was: reverted.
		return verdict{done: true, imageID: cs.ImageID, failingDone: true}
	case reverting && c.FailingBefore == "" && !attributable(cs, c, target, onTarget):
		// Right after the revert patch the status still shows the failure of the image
		// being left until the kubelet acts on the change.
		return verdict{waiting: fmt.Sprintf("container %q: still shows %s of the image it is leaving", c.Name, reason)}
	case c.FailingBefore == "":
		return verdict{failed: msg, code: code}
	case !reverting && onTarget:
		// It crashes on the new image as it crashed on the old one: the update did what it
		// could, and the failure is reported as the pod's own, not blamed on the image.
		return verdict{done: true, imageID: cs.ImageID, unhealthy: failingAsBefore(msg, c)}
	case attributable(cs, c, target, onTarget):
		return verdict{failed: fmt.Sprintf("%s (pre-existing: the container was already in %s before the update)", msg, c.FailingBefore), code: code}
	default:
		return verdict{waiting: fmt.Sprintf("container %q: still %s, as before the update", c.Name, reason)}
	}
}

// failingAsBefore says that a container fails on its new image as it did before the update.
func failingAsBefore(why string, c *ContainerState) string {
	return fmt.Sprintf("%s; it was already in %s before the update: reported, not blamed on the new image", why, c.FailingBefore)
}

// CheckUpdated looks again at a pod whose update completed (stage Updated) and returns why it
// no longer holds, or "": a changed container that now fails (crash loop, a failure the
// kubelet reports) or whose restart count climbed past the one restart the update caused. A
// container that was failing before the update is not judged.
func CheckUpdated(pod *corev1.Pod, st *State) string {
	for _, c := range st.Containers {
		cs := containerStatus(pod, c.Name, c.Init)
		if cs == nil || c.FailingBefore != "" {
			continue
		}
		if reason := failingReason(cs); reason != "" {
			return fmt.Sprintf("%s: container %q: %s", reason, c.Name, cs.State.Waiting.Message)
		}
		if cs.RestartCount > c.RestartsBefore+c.expectedRestarts() {
			return restartsClimbed(&c, cs)
		}
	}
	return ""
}

func restartsClimbed(c *ContainerState, cs *corev1.ContainerStatus) string {
	return fmt.Sprintf("RestartCountClimbing: container %q restarted %d times since the update (restart count %d -> %d)",
		c.Name, cs.RestartCount-c.RestartsBefore, c.RestartsBefore, cs.RestartCount)
}

// attributable reports whether a failure the status shows belongs to the target image rather
// than to the image the container ran before: it crashed on the target, or the kubelet names the
// target in a pull failure.
func attributable(cs *corev1.ContainerStatus, c *ContainerState, target string, onTarget bool) bool {
	reason := cs.State.Waiting.Reason
	if pullReasons[reason] {
		return strings.Contains(cs.State.Waiting.Message, target) || strings.Contains(cs.State.Waiting.Message, normalizeImage(target))
	}
	return onTarget
}

// startBackOff reports whether a CrashLoopBackOff is the kubelet's back-off before it starts the
// patched image, not a crash of it: the status still names the container recorded at the patch
// (as the current container, or as the last terminated one) and the restart count did not
// climb past the recorded one, so no container of the patched image has run.
func (c *ContainerState) startBackOff(cs *corev1.ContainerStatus) bool {
	if c.FromContainerID == "" || cs.RestartCount > c.FromRestarts {
		return false
	}
	if cs.ContainerID == c.FromContainerID {
		return true
	}
	last := cs.LastTerminationState.Terminated
	return last != nil && last.ContainerID == c.FromContainerID
}

// fromImageID is the imageID the container ran when this update patched it.
func (c *ContainerState) fromImageID() string {
	if c.FromImageID != "" {
		return c.FromImageID
	}
	return c.BeforeImageID
}
