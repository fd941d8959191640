package kubeletsim

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// deadlineExceeded is the message a kubelet gives a pod it stops at its activeDeadlineSeconds.
const deadlineExceeded = "Pod was active on the node longer than the specified deadline"

// syncRunOnce plays a pod with restartPolicy Never as a kubelet runs it to completion: each init
// container in order pulls its image, runs and exits; then the containers pull and start. One
// with a command runs it for the start delay and exits; one without runs its image's entrypoint,
// which the simulator takes for a server: it becomes ready and runs until stopped, as in any
// other pod. The pod Succeeds when every container exited 0 and Fails when one did not, or when
// activeDeadlineSeconds ran out first. A pull that fails keeps the pod Pending, the container in
// ErrImagePull then ImagePullBackOff. Pulled images stay in the node's store.
func (p *podSim) syncRunOnce(pod *corev1.Pod, now time.Time, t timings, reg *registry) (corev1.PodStatus, time.Time) {
	var next time.Time
	earliest := func(d time.Time) {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	var deadline time.Time
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil {
		deadline = p.startTime.Add(time.Duration(*ads) * time.Second)
	}
	expired := !deadline.IsZero() && !now.Before(deadline)
	at := now
	if expired {
		at = deadline // nothing moves on after the kubelet stopped the pod
	}
	secrets := pullSecretsOf(pod)
	sim := func(sims map[string]*containerSim, spec corev1.Container, runOnce bool) *containerSim {
		c := sims[spec.Name]
		if c == nil {
			c = &containerSim{name: spec.Name}
			sims[spec.Name] = c
		}
		c.runOnce = runOnce
		c.env = pullEnv{node: p.node, namespace: pod.Namespace, pullSecrets: secrets, policy: spec.ImagePullPolicy}
		c.allocated = *spec.Resources.DeepCopy()
		return c
	}
	if p.initContainers == nil {
		p.initContainers = map[string]*containerSim{}
	}

	initialized, initFailed := true, false
	initStatuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	for _, spec := range pod.Spec.InitContainers {
		if !initialized {
			initStatuses = append(initStatuses, waitingStatus(spec, "PodInitializing"))
			continue
		}
		c := sim(p.initContainers, spec, true)
		earliest(c.advance(at, spec.Image, crashesHere(pod, spec.Image), false, t, reg))
		initStatuses = append(initStatuses, c.status(at, t))
		if c.phase != phaseExited || c.exited.ExitCode != 0 {
			initialized = false
			initFailed = c.phase == phaseExited
		}
	}

	var waiting, running, failed int
	allReady := initialized
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, spec := range pod.Spec.Containers {
		if !initialized {
			statuses = append(statuses, waitingStatus(spec, "PodInitializing"))
			waiting++
			continue
		}
		c := sim(p.containers, spec, len(spec.Command) > 0)
		earliest(c.advance(at, spec.Image, crashesHere(pod, spec.Image), false, t, reg))
		statuses = append(statuses, c.status(at, t))
		allReady = allReady && c.ready()
		switch {
		case c.phase == phaseExited:
			if c.exited.ExitCode != 0 {
				failed++
			}
		case c.running():
			running++
		default:
			waiting++
		}
	}

	// The kubelet's phase for restartPolicy Never.
	var phase corev1.PodPhase
	switch {
	case initFailed:
		phase = corev1.PodFailed
	case !initialized || waiting > 0:
		phase = corev1.PodPending
	case running > 0:
		phase = corev1.PodRunning
	case failed > 0:
		phase = corev1.PodFailed
	default:
		phase = corev1.PodSucceeded
	}
	p.running = phase == corev1.PodRunning
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	killed := expired && !terminal
	if killed {
		// The kubelet kills what still runs; what waits stays as it was.
		phase, terminal = corev1.PodFailed, true
		p.running, allReady = false, false
		for _, sts := range [][]corev1.ContainerStatus{initStatuses, statuses} {
			for i := range sts {
				if r := sts[i].State.Running; r != nil {
					sts[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 137, Reason: "Error", ContainerID: sts[i].ContainerID,
						StartedAt: r.StartedAt, FinishedAt: rfc3339(deadline),
					}}
					sts[i].Started, sts[i].Ready = ptr(false), false
				}
			}
		}
	}
	if terminal {
		next = time.Time{}
	} else if !deadline.IsZero() {
		earliest(deadline)
	}

	p.observed = pod.Generation
	status := p.render(pod, now, phase, statuses, initStatuses, initialized, allReady)
	if killed {
		status.Reason, status.Message = "DeadlineExceeded", deadlineExceeded
	}
	return status, next
}

// waitingStatus is the status of a container that has not begun: it waits for reason.
func waitingStatus(spec corev1.Container, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: spec.Name, Image: spec.Image, Started: ptr(false),
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
	}
}
