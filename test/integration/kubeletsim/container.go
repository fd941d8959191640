package kubeletsim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// timings are the simulated durations of a container's life.
type timings struct {
	pull, start, slowStart, backoff time.Duration
	// stop is how long the replaced instance still runs, and is reported Running (and Ready
	// when it was), after its image changed (Config.StopDelay).
	stop time.Duration
	// sandbox is what a new pod waits before its containers are created (Config.SandboxDelay).
	sandbox time.Duration
}

type containerPhase int

const (
	phasePulling      containerPhase = iota // pulling the image; the previous instance, if any, is stopped
	phasePullFailed                         // the pull failed; ErrImagePull, then ImagePullBackOff
	phaseInvalid                            // the reference does not parse
	phaseStarting                           // running, not ready yet
	phaseReady                              // running and ready
	phaseBackOff                            // crashed; waiting to be restarted
	phaseExited                             // a run-once instance ended; it is not restarted
	phaseStopping                           // the image changed; the replaced instance still runs until the stop delay ends
	phaseStartBackOff                       // the image changed to one this container started recently; the kubelet backs off first
)

// The kubelet's crash back-off for a container, keyed by pod UID, container name and image (its
// flowcontrol.Backoff, kubelet v1.34): every start counts toward it, an in-place start too, and
// it is forgotten after ten minutes. Its initial 10 s is the simulator's BackOff, so the window
// and the cap scale with it: ten minutes is 60 initial back-offs, the 5 minute cap 30.
const (
	backOffWindow = 60
	backOffCap    = 30
)

// startRecord is the back-off state of one image in one container: when it last started, and
// the back-off last waited before starting it (zero: none yet).
type startRecord struct {
	at      time.Time
	backoff time.Duration
}

// containerSim is the simulated runtime state of one container of one pod.
type containerSim struct {
	name      string
	specImage string // the spec image the current lifecycle serves
	img       image
	beh       behavior
	parseErr  error
	// env is the pod's pull context, set before each advance.
	env pullEnv
	// pod names the pod as the kubelet's back-off messages do: NAME_NAMESPACE(UID). Set with env.
	pod string
	// runOnce means a run-to-completion container (an init container, or one with a command, of
	// a pod with restartPolicy Never): once started, the instance runs for the start delay and
	// exits (1 when the image crashes, else 0), and is never restarted.
	runOnce bool
	// exited is how a run-once instance ended.
	exited *corev1.ContainerStateTerminated
	// fromRegistry means the image is on a real registry; pulled is then its resolution.
	fromRegistry bool
	pulled       pullResult
	phase        containerPhase
	since        time.Time // when phase began
	// stoppingReady is whether the instance being stopped (phaseStopping) was Ready.
	stoppingReady bool
	// startBackOff is the back-off waited in phaseStartBackOff.
	startBackOff time.Duration
	// crashed counts the crashes of the current image's instances: the first restarts at once,
	// later ones wait the back-off (CrashLoopBackOff), as the kubelet's back-off has no entry for
	// an image until its first restart.
	crashed int
	// starts is the crash back-off state of each image (normalized) this container started.
	starts map[string]*startRecord

	// The current (or most recent) container instance.
	started     bool // an instance was ever created
	containerID string
	image       string // normalized reference the instance runs
	imageID     string
	startedAt   time.Time
	restarts    int32
	last        *corev1.ContainerStateTerminated
}

// adoptContainer rebuilds the runtime state of a container from the status a previous simulator
// wrote, so restarting the simulator does not restart containers.
func adoptContainer(spec corev1.Container, st corev1.ContainerStatus) *containerSim {
	c := &containerSim{name: spec.Name}
	if st.ContainerID == "" || st.State.Running == nil {
		return c
	}
	img, err := parseImage(spec.Image)
	if err != nil || img.normalized != st.Image {
		return c // the spec moved on; a new lifecycle starts on the next advance
	}
	c.specImage, c.img, c.beh = spec.Image, img, behaviorOf(img)
	c.started, c.containerID, c.image, c.imageID = true, st.ContainerID, st.Image, st.ImageID
	c.startedAt, c.restarts, c.last = st.State.Running.StartedAt.Time, st.RestartCount, nil
	if st.LastTerminationState.Terminated != nil {
		c.last = st.LastTerminationState.Terminated.DeepCopy()
	}
	c.phase, c.since = phaseStarting, st.State.Running.StartedAt.Time
	if st.Ready {
		c.phase = phaseReady
	}
	return c
}

// advance moves the container through its life up to now for the given spec image and returns
// when it next changes on its own (zero when it will not). crash makes the image crash-loop in
// this container whatever its tag.
func (c *containerSim) advance(now time.Time, specImage string, crash bool, t timings, reg *registry) time.Time {
	if specImage != c.specImage || c.since.IsZero() {
		c.changeImage(now, specImage, t, reg)
		c.beh.crashes = c.beh.crashes || (crash && c.parseErr == nil)
	} else if crash && !c.beh.crashes && c.parseErr == nil {
		// The image was marked to crash in this pod while it ran: the running instance exits,
		// and every restart crashes too.
		c.beh.crashes = true
		if c.phase == phaseReady {
			c.crash(now, reg)
		}
	}
	for {
		switch c.phase {
		case phaseInvalid, phaseExited:
			return time.Time{}
		case phaseReady:
			if c.runOnce {
				// Adopted from an earlier simulator while it ran: it ends now.
				c.exit(now)
				continue
			}
			return time.Time{}
		case phasePulling:
			due := c.since.Add(t.pull)
			if c.fromRegistry && c.pulled.onNode {
				due = c.since // the node holds the content: nothing to download
			}
			if now.Before(due) {
				return due
			}
			if c.beh.pullFails {
				c.phase, c.since = phasePullFailed, due
				continue
			}
			c.create(due, reg)
		case phasePullFailed:
			// ErrImagePull turns into ImagePullBackOff after one back-off; then nothing changes.
			if due := c.since.Add(t.backoff); now.Before(due) {
				return due
			}
			return time.Time{}
		case phaseStarting:
			delay := t.start
			if c.beh.slow && !c.beh.crashes {
				delay = t.slowStart
			}
			due := c.since.Add(delay)
			if now.Before(due) {
				return due
			}
			if c.runOnce {
				c.exit(due)
				continue
			}
			if c.beh.crashes {
				c.crash(due, reg)
				continue
			}
			c.phase, c.since = phaseReady, due
		case phaseBackOff:
			due := c.since.Add(t.backoff)
			if now.Before(due) {
				return due
			}
			c.create(due, reg)
		case phaseStopping:
			due := c.since.Add(t.stop)
			if now.Before(due) {
				return due
			}
			c.last = &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", ContainerID: c.containerID,
				StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(due),
			}
			c.beginStart(due, t)
		case phaseStartBackOff:
			due := c.since.Add(c.startBackOff)
			if now.Before(due) {
				return due
			}
			c.phase, c.since = phasePulling, due
		}
	}
}

// crash ends the running instance with exit 1 at the given time. The first crash of an image's
// instances restarts it at once; later ones wait the back-off in CrashLoopBackOff.
func (c *containerSim) crash(at time.Time, reg *registry) {
	c.last = &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", ContainerID: c.containerID,
		StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(at),
	}
	c.crashed++
	if c.crashed == 1 {
		c.create(at, reg)
		return
	}
	c.phase, c.since = phaseBackOff, at
}

// beginStart starts the new spec image's lifecycle once the replaced instance is gone: a pull,
// after the kubelet's back-off when this container started the image within the back-off window.
// The back-off doubles each time, up to its cap, and is shown as CrashLoopBackOff although
// nothing crashed.
func (c *containerSim) beginStart(at time.Time, t timings) {
	c.phase, c.since = phasePulling, at
	rec := c.starts[c.img.normalized]
	if rec == nil || t.backoff <= 0 {
		return
	}
	if at.Sub(rec.at) >= backOffWindow*t.backoff {
		rec.backoff = 0
		return
	}
	rec.backoff = min(max(2*rec.backoff, t.backoff), backOffCap*t.backoff)
	c.phase, c.startBackOff = phaseStartBackOff, rec.backoff
}

// changeImage stops the running instance, if any, and starts the new spec image's lifecycle:
// the replaced instance runs on for the stop delay (a real kubelet reports it Running, Ready and
// with its containerID for about a second after the patch), then the new image waits out the
// back-off if it started recently, is pulled, and starts.
func (c *containerSim) changeImage(now time.Time, specImage string, t timings, reg *registry) {
	stopping := c.phase == phaseStopping
	if c.started && (c.phase == phaseStarting || c.phase == phaseReady) && !c.runOnce {
		c.stoppingReady, stopping = c.phase == phaseReady, true
		c.phase, c.since = phaseStopping, now
	} else if c.started && (c.phase == phaseStarting || c.phase == phaseReady) {
		c.last = &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", ContainerID: c.containerID,
			StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(now),
		}
	}
	c.specImage = specImage
	c.img, c.parseErr = parseImage(specImage)
	c.beh = behavior{}
	c.crashed = 0
	if c.parseErr != nil {
		c.phase, c.since = phaseInvalid, now
		return
	}
	if !stopping {
		c.beginStart(now, t)
	}
	c.beh = behaviorOf(c.img)
	c.fromRegistry, c.pulled = false, pullResult{}
	if reg.remote.handles(c.img) {
		// Resolved when the pull begins, as a runtime resolves the tag before fetching layers.
		// This runs under the simulator's lock; the registries are on loopback, so it is short.
		c.fromRegistry = true
		c.pulled = reg.remote.pull(c.img, c.env)
		c.beh.pullFails = c.pulled.reason != ""
	}
}

// create starts a new container instance at the given time; a restart counts when an earlier
// instance existed.
func (c *containerSim) create(at time.Time, reg *registry) {
	if c.started {
		c.restarts++
	}
	if c.starts == nil {
		c.starts = map[string]*startRecord{}
	}
	if rec := c.starts[c.img.normalized]; rec != nil {
		rec.at = at
	} else {
		c.starts[c.img.normalized] = &startRecord{at: at}
	}
	c.started = true
	c.containerID = newContainerID()
	c.image = c.img.normalized
	if c.fromRegistry {
		c.imageID = c.img.repo + "@" + c.pulled.digest
		reg.remote.store(c.img, c.pulled.digest, c.env.node)
	} else {
		c.imageID = reg.imageID(c.img)
	}
	c.startedAt = at
	c.phase, c.since = phaseStarting, at
}

// exit ends a run-once instance at the given time: exit code 1 when the image crashes, else 0.
func (c *containerSim) exit(at time.Time) {
	c.exited = &corev1.ContainerStateTerminated{
		ExitCode: 0, Reason: "Completed", ContainerID: c.containerID,
		StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(at),
	}
	if c.beh.crashes {
		c.exited.ExitCode, c.exited.Reason = 1, "Error"
	}
	c.phase, c.since = phaseExited, at
}

func (c *containerSim) ready() bool {
	return c.phase == phaseReady || c.phase == phaseStopping && c.stoppingReady
}

func (c *containerSim) running() bool {
	return c.phase == phaseStarting || c.phase == phaseReady || c.phase == phaseStopping
}

// status renders the container as the kubelet reports it in pod.status.containerStatuses.
func (c *containerSim) status(now time.Time, t timings) corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name:         c.name,
		RestartCount: c.restarts,
		Ready:        c.ready(),
		Started:      ptr(c.running()),
	}
	if c.started {
		st.Image, st.ImageID, st.ContainerID = c.image, c.imageID, c.containerID
	} else {
		st.Image = c.specImage
	}
	if c.last != nil {
		st.LastTerminationState.Terminated = c.last.DeepCopy()
	}
	switch c.phase {
	case phasePulling:
		if c.started {
			// The old instance is stopped; its terminated state stays until the new one starts.
			st.State.Terminated = c.last.DeepCopy()
			st.LastTerminationState = corev1.ContainerState{}
		} else {
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
	case phasePullFailed:
		reason := "ErrImagePull"
		msg := fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", c.img.normalized, c.img.normalized, c.img.normalized)
		if c.fromRegistry {
			reason, msg = c.pulled.reason, c.pulled.message
		}
		if !now.Before(c.since.Add(t.backoff)) && reason != "ErrImageNeverPull" {
			// The back-off keeps the cause, as kubelet v1.34.5 words it (kubernetes#127918,
			// pkg/kubelet/images/image_manager.go): the failed pull's "REASON: MESSAGE" after
			// "Back-off pulling image IMAGE: ", so a status read after the back-off began still
			// says why the pull failed.
			msg = fmt.Sprintf("Back-off pulling image %q: %s: %s", c.specImage, reason, msg)
			reason = "ImagePullBackOff"
		}
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	case phaseInvalid:
		st.State.Waiting = &corev1.ContainerStateWaiting{
			Reason:  "InvalidImageName",
			Message: fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: invalid reference format", c.specImage, c.specImage),
		}
	case phaseStarting, phaseReady, phaseStopping:
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: rfc3339(c.startedAt)}
	case phaseBackOff, phaseStartBackOff:
		// The kubelet's words (kuberuntime, v1.34); the status keeps the last instance, its
		// image and restart count, as no new instance was created.
		backoff := t.backoff
		if c.phase == phaseStartBackOff {
			backoff = c.startBackOff
		}
		st.State.Waiting = &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, c.name, c.pod),
		}
	case phaseExited:
		st.State.Terminated = c.exited.DeepCopy()
	}
	return st
}

func newContainerID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "containerd://" + hex.EncodeToString(b)
}

// rfc3339 truncates to seconds, as the API stores times, so a status read back compares equal.
func rfc3339(t time.Time) metav1.Time { return metav1.NewTime(t).Rfc3339Copy() }

func ptr[T any](v T) *T { return &v }
