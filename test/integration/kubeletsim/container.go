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
	// resize is how long an accepted resize that needs no restart takes to reach the running
	// container and its status (Config.ResizeDelay).
	resize time.Duration
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

// backOffCap is the kubelet's crash back-off cap over its initial back-off (300 s over 10 s);
// the simulator's BackOff stands for the initial one, so the cap scales with it.
const backOffCap = 30

// backOffEntry is the kubelet's crash back-off of one image in one container: kubelet v1.34.5
// keeps a flowcontrol.Backoff entry per pod, container name and image (GetBackoffKey).
type backOffEntry struct {
	backoff    time.Duration
	lastUpdate time.Time
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
	// backoffs are the kubelet's back-off entries of this container, by image (normalized).
	backoffs map[string]*backOffEntry
	// lastExit is when the newest exited instance finished; zero when none has.
	lastExit time.Time
	// syncEnded is when the kubelet's latest sync that stopped this container or pulled its
	// image ended: the image started, its pull failed, or the start met a back-off.
	syncEnded time.Time
	// wait and until are the back-off a phaseBackOff or phaseStartBackOff waits (its message)
	// and when it ends.
	wait  time.Duration
	until time.Time

	// allocated is the resources the kubelet admitted for this container (podSim.allocated),
	// set before each advance: a new instance starts with them.
	allocated corev1.ResourceRequirements
	// actuated is the resources the current instance runs with, as its status reports them.
	actuated corev1.ResourceRequirements
	// resizeAt is when an accepted resize that needs no restart reaches the running instance,
	// with resizeTo; zero when none is underway.
	resizeAt time.Time
	resizeTo corev1.ResourceRequirements
	// present means the spec image is on the node already: the instance is restarted for a
	// resize, and the start pulls nothing.
	present bool
	// quiet is a container the kubelet has no readiness or startup probe for (a native sidecar
	// without them; set before each advance): it is Ready as soon as it runs, and the status
	// shows no gap when it is restarted in place.
	quiet bool

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
	c.actuated = *spec.Resources.DeepCopy()
	if st.Resources != nil {
		c.actuated = *st.Resources.DeepCopy()
	}
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
//
// A spec image that changes while the kubelet stops the container for an earlier change, or
// pulls the image of one, waits until that image has started (or its pull failed): the kubelet
// kills and starts in one sync, with the spec it read when the sync began, and only its next sync
// sees the newer spec. hold says that a sync of the pod is underway (podSim.advanceLive): a
// changed spec image then waits whatever this container does, and the container's own part of
// the sync ending returns at once, when it ended, for the pod to decide what the next sync does.
func (c *containerSim) advance(now time.Time, specImage string, crash, hold bool, t timings, reg *registry) time.Time {
	return c.actuate(now, c.advanceLife(now, specImage, crash, hold, t, reg))
}

// actuate applies an accepted resize that needs no restart to the running instance once its
// time has come, and returns next, or the resize's time when it is sooner. An instance replaced
// meanwhile drops it: the new one started with the allocated resources.
func (c *containerSim) actuate(now, next time.Time) time.Time {
	if c.resizeAt.IsZero() {
		return next
	}
	if c.phase != phaseStarting && c.phase != phaseReady {
		c.resizeAt = time.Time{}
		return next
	}
	if now.Before(c.resizeAt) {
		if next.IsZero() || c.resizeAt.Before(next) {
			return c.resizeAt
		}
		return next
	}
	c.actuated, c.resizeAt = c.resizeTo, time.Time{}
	return next
}

// restartForResize stops the running instance at the given time and starts the same image
// again, with the allocated resources: the kubelet's restart for a resize whose resizePolicy
// says RestartContainer ("Container NAME resize requires restart"). The kill and the start are
// one sync, as for an image change, with the same stop and back-off; the image is on the node.
func (c *containerSim) restartForResize(at time.Time) {
	c.stoppingReady = c.phase == phaseReady
	c.phase, c.since = phaseStopping, at
	c.present, c.resizeAt = true, time.Time{}
}

// advanceLife is advance without the resize that needs no restart.
func (c *containerSim) advanceLife(now time.Time, specImage string, crash, hold bool, t timings, reg *registry) time.Time {
	if c.since.IsZero() || specImage != c.specImage && !c.inSync() && !hold {
		c.follow(now, specImage, crash, t, reg)
	} else if specImage == c.specImage && crash && !c.beh.crashes && c.parseErr == nil {
		// The image was marked to crash in this pod while it ran: the running instance exits,
		// and every restart crashes too.
		c.beh.crashes = true
		if c.phase == phaseReady {
			c.crash(now, t, reg)
		}
	}
	syncing := c.inSync()
	for {
		if syncing && !c.inSync() {
			// The sync ended when the phase it was in did.
			c.syncEnded = c.since
			if hold {
				return c.since
			}
		}
		syncing = c.inSync()
		if specImage != c.specImage && !syncing && !hold {
			// The sync that held the change back has ended.
			c.follow(c.since, specImage, crash, t, reg)
			syncing = c.inSync()
		}
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
			due := c.since.Add(c.pullTime(t))
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
			switch {
			case c.beh.slow && !c.beh.crashes:
				delay = t.slowStart
			case c.quiet && !c.beh.crashes:
				delay = 0 // no readiness probe to wait for
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
				c.crash(due, t, reg)
				continue
			}
			c.phase, c.since = phaseReady, due
		case phaseBackOff, phaseStartBackOff:
			if now.Before(c.until) {
				return c.until
			}
			// Past the back-off: the kubelet's check passes, and counts this start.
			due := c.until
			c.backOff(due, c.lastExit, t)
			if c.phase == phaseBackOff {
				c.create(due, reg)
			} else {
				c.phase, c.since = phasePulling, due
			}
		case phaseStopping:
			due := c.since.Add(t.stop)
			if now.Before(due) {
				return due
			}
			if c.quiet && !c.beh.pullFails && !c.inBackOff(due, c.lastExit, t) {
				// The kill, the pull and the start are one sync, and the kubelet writes the
				// status between syncs: with no probe to report the killed instance not ready,
				// the status shows it Running until the new one runs (seen with a native sidecar
				// on the real node: the pod stayed Ready throughout).
				if end := due.Add(c.pullTime(t)); now.Before(end) {
					return end
				}
			}
			// The kubelet kills the container and starts the new image in one sync, deciding on
			// the status it read before the kill: the newest exited instance is then the one
			// before the killed one. Its next syncs see the killed one.
			before := c.lastExit
			c.last = &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", ContainerID: c.containerID,
				StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(due),
			}
			c.lastExit = due
			c.phase, c.since = phasePulling, due
			if in, backoff := c.backOff(due, before, t); in {
				c.phase, c.wait, c.until = phaseStartBackOff, backoff, due.Add(backoff)
			}
		}
	}
}

// crash ends the running instance with exit 1 at the given time; it restarts at once unless
// the kubelet's back-off holds it (CrashLoopBackOff).
func (c *containerSim) crash(at time.Time, t timings, reg *registry) {
	c.last = &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", ContainerID: c.containerID,
		StartedAt: rfc3339(c.startedAt), FinishedAt: rfc3339(at),
	}
	c.lastExit = at
	if in, backoff := c.backOff(at, at, t); in {
		c.phase, c.since, c.wait, c.until = phaseBackOff, at, backoff, at.Add(backoff)
		return
	}
	c.create(at, reg)
}

// backOff is the kubelet's check before it starts the spec image (kuberuntime doBackOff, with
// flowcontrol.Backoff's IsInBackOffSince and Next): exited is when the newest exited instance
// finished, as the status the kubelet acts on says. With none, the start goes ahead and counts
// for nothing. Within the image's back-off since then, the start waits (in) with that back-off;
// otherwise it goes ahead, and the entry starts at the initial back-off or doubles, up to the
// cap. An entry expires when the exit came more than twice the cap after its last update. So
// every start after an exit counts, an in-place one too, and going back soon to an image
// started that way waits although nothing crashed.
func (c *containerSim) backOff(now, exited time.Time, t timings) (in bool, backoff time.Duration) {
	if exited.IsZero() || t.backoff <= 0 {
		return false, 0
	}
	limit := backOffCap * t.backoff
	key := c.img.normalized
	e := c.backoffs[key]
	expired := e != nil && exited.Sub(e.lastUpdate) > 2*limit
	if c.inBackOff(now, exited, t) {
		return true, e.backoff
	}
	if c.backoffs == nil {
		c.backoffs = map[string]*backOffEntry{}
	}
	if e == nil || expired {
		e = &backOffEntry{backoff: t.backoff}
		c.backoffs[key] = e
	} else {
		e.backoff = min(2*e.backoff, limit)
	}
	e.lastUpdate = now
	return false, 0
}

// inBackOff is backOff's check alone: whether a start at now waits, changing nothing.
func (c *containerSim) inBackOff(now, exited time.Time, t timings) bool {
	if exited.IsZero() || t.backoff <= 0 {
		return false
	}
	e := c.backoffs[c.img.normalized]
	return e != nil && exited.Sub(e.lastUpdate) <= 2*backOffCap*t.backoff && now.Sub(exited) < e.backoff
}

// pullTime is how long pulling the spec image takes: nothing when the node holds it.
func (c *containerSim) pullTime(t timings) time.Duration {
	if c.present || c.fromRegistry && c.pulled.onNode {
		return 0
	}
	return t.pull
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
	c.specImage, c.present = specImage, false
	c.img, c.parseErr = parseImage(specImage)
	c.beh = behavior{}
	if c.parseErr != nil {
		c.phase, c.since = phaseInvalid, now
		return
	}
	if !stopping {
		// Nothing runs: the new image starts now, or after its back-off since the last exit.
		c.phase, c.since = phasePulling, now
		if in, backoff := c.backOff(now, c.lastExit, t); in {
			c.phase, c.wait, c.until = phaseStartBackOff, backoff, c.lastExit.Add(backoff)
		}
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
	c.actuated, c.resizeAt = *c.allocated.DeepCopy(), time.Time{}
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

// follow starts the lifecycle of specImage at the given time; crash marks it to crash-loop in
// this container.
func (c *containerSim) follow(at time.Time, specImage string, crash bool, t timings, reg *registry) {
	c.changeImage(at, specImage, t, reg)
	c.beh.crashes = c.beh.crashes || (crash && c.parseErr == nil)
}

// inSync reports whether the kubelet is in the sync that acts on the spec image c.specImage: it
// stops the instance that ran before, or pulls the image to start.
func (c *containerSim) inSync() bool {
	return c.phase == phaseStopping || c.phase == phasePulling
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
		// As kubelet v1.34 reports them (kubelet_pods.go convertContainerStatusResources): what
		// a running instance runs with, the allocated resources otherwise. The API server
		// accepts a resize of a pod only when its running container reports them
		// (validation.isPodResizeRequestSupported).
		res := c.allocated
		if c.running() {
			res = c.actuated
		}
		st.Resources = res.DeepCopy()
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
		st.State.Waiting = &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", c.wait, c.name, c.pod),
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
