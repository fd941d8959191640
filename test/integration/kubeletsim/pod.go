package kubeletsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podSim is the simulated runtime state of one pod on one node.
type podSim struct {
	namespace, name string
	node            string
	podIP, hostIP   string
	startTime       time.Time
	// sandboxReady is when the pod's sandbox, network and volumes are set up and its
	// containers can be created.
	sandboxReady time.Time
	containers   map[string]*containerSim
	// initContainers are the run-once init containers of a pod with restartPolicy Never; those
	// of other pods are reported completed and not simulated, except native sidecars.
	initContainers map[string]*containerSim
	// sidecars are the native sidecars (init containers with restartPolicy Always) of a pod
	// with restartPolicy Always: they run beside the containers and live as they do.
	sidecars map[string]*containerSim
	running  bool // every container was created once: the pod left Pending
	ready    bool // the Ready condition last computed
	// observed is the spec generation the kubelet's latest sync read, which the status reports.
	observed int64
	// phase is the pod phase last reported.
	phase corev1.PodPhase
	// read is the pod as the latest sync read it.
	read *corev1.Pod

	// allocated is the resources the kubelet admitted for each container and native sidecar:
	// the spec's when the pod was first synced, and a resize's once it fit the node.
	allocated map[string]corev1.ResourceRequirements
	// pending and inProgress are the PodResizePending and PodResizeInProgress conditions the
	// kubelet holds; nil when it holds none.
	pending, inProgress *resizeCondition
	// others returns the cpu (millicores) and memory (bytes) requests the node's other pods were
	// allocated, which a resize must leave room for; nil counts none.
	others func() (cpu, memory int64)
	// resized says that the latest sync allocated a resize.
	resized bool

	traffic trafficCounters
	limits  []limit
}

// limit is one container resource limit, as kube-state-metrics reports it.
type limit struct {
	container, resource, unit string
	value                     float64
}

func limitsOf(pod *corev1.Pod) []limit {
	var out []limit
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			out = append(out, limit{c.Name, "cpu", "core", q.AsApproximateFloat64()})
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			out = append(out, limit{c.Name, "memory", "byte", q.AsApproximateFloat64()})
		}
	}
	return out
}

// newPodSim starts tracking a pod, adopting what an earlier simulator reported about it.
func newPodSim(pod *corev1.Pod, podIP, hostIP string, now time.Time) *podSim {
	p := &podSim{
		namespace: pod.Namespace, name: pod.Name,
		podIP: podIP, hostIP: hostIP,
		startTime:  now,
		containers: map[string]*containerSim{},
		sidecars:   map[string]*containerSim{},
		observed:   pod.Status.ObservedGeneration,
	}
	if pod.Status.PodIP != "" {
		p.podIP = pod.Status.PodIP
	}
	if pod.Status.StartTime != nil {
		p.startTime = pod.Status.StartTime.Time
	}
	p.running = pod.Status.Phase == corev1.PodRunning
	p.phase = pod.Status.Phase
	p.limits = limitsOf(pod)
	if len(pod.Status.ContainerStatuses) > 0 {
		p.allocated = adoptedAllocation(pod)
	}
	for _, spec := range pod.Spec.Containers {
		for _, st := range pod.Status.ContainerStatuses {
			if st.Name == spec.Name {
				p.containers[spec.Name] = adoptContainer(spec, st)
			}
		}
	}
	for _, spec := range pod.Spec.InitContainers {
		for _, st := range pod.Status.InitContainerStatuses {
			if st.Name == spec.Name && nativeSidecar(spec) {
				p.sidecars[spec.Name] = adoptContainer(spec, st)
			}
		}
	}
	return p
}

// nativeSidecar reports whether an init container is a native sidecar: restartPolicy Always.
func nativeSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// sync advances every container to now and returns the status the kubelet would report, and
// when the pod next changes on its own (zero when it will not).
func (p *podSim) sync(pod *corev1.Pod, now time.Time, t timings, reg *registry) (corev1.PodStatus, time.Time) {
	// kube-state-metrics reports the spec's limits, which a resize changes.
	p.limits, p.read, p.resized = limitsOf(pod), pod, false
	if p.allocated == nil {
		// Admitted with the resources of its spec.
		p.allocated = allocationOf(pod)
	}
	if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		return p.syncRunOnce(pod, now, t, reg)
	}
	if now.Before(p.sandboxReady) {
		return p.creatingSandbox(pod, now), p.sandboxReady
	}
	var next time.Time
	secrets := pullSecretsOf(pod)
	allCreated, allReady := true, true
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	sidecarStatuses := map[string]corev1.ContainerStatus{}
	lives := p.advanceLive(pod, secrets, now, t, reg)
	if p.inProgress != nil && !resizing(lives) {
		p.inProgress = nil
	}
	for _, l := range lives {
		if !l.next.IsZero() && (next.IsZero() || l.next.Before(next)) {
			next = l.next
		}
		allCreated = allCreated && l.c.started
		allReady = allReady && l.c.ready()
		if l.sidecar {
			sidecarStatuses[l.spec.Name] = l.c.status(now, t)
		} else {
			statuses = append(statuses, l.c.status(now, t))
		}
	}

	// A native sidecar runs beside the containers: the kubelet restarts it when its image
	// changes ("Init container NAME definition changed") and counts its readiness in the pod's
	// (kubelet v1.34, kuberuntime computeInitContainerActions and status.GenerateContainersReadyCondition).
	// The other init containers ran to completion before the pod started.
	var initStatuses []corev1.ContainerStatus
	for _, spec := range pod.Spec.InitContainers {
		if nativeSidecar(spec) {
			initStatuses = append(initStatuses, sidecarStatuses[spec.Name])
			continue
		}
		st := corev1.ContainerStatus{Name: spec.Name, Image: spec.Image, Ready: true, Started: ptr(false), Resources: spec.Resources.DeepCopy()}
		if img, err := parseImage(spec.Image); err == nil {
			st.Image, st.ImageID = img.normalized, reg.imageID(img)
			if reg.remote.handles(img) {
				// Pulled once onto the node; later syncs find it there and ask no registry.
				env := pullEnv{node: p.node, namespace: pod.Namespace, pullSecrets: secrets, policy: corev1.PullIfNotPresent}
				st.ImageID = ""
				if res := reg.remote.pull(img, env); res.reason == "" {
					reg.remote.store(img, res.digest, p.node)
					st.ImageID = img.repo + "@" + res.digest
				}
			}
		}
		st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: rfc3339(p.startTime), FinishedAt: rfc3339(p.startTime)}
		initStatuses = append(initStatuses, st)
	}
	if allCreated {
		p.running = true
	}

	phase := corev1.PodPending
	if p.running {
		phase = corev1.PodRunning
	}
	return p.render(pod, now, phase, statuses, initStatuses, true, allReady), next
}

// liveContainer is a container that runs for the pod's life, a container or a native sidecar,
// with its spec and when it next changes on its own.
type liveContainer struct {
	c       *containerSim
	spec    corev1.Container
	sidecar bool
	next    time.Time
}

// advanceLive advances the pod's live containers to now, in the spec's order, containers first;
// secrets are the pod's image pull secrets.
//
// The kubelet syncs a pod in one worker, with the spec it read when the sync began: while a sync
// stops containers, or pulls and starts images, a newer spec waits, for every container, until
// that sync has ended, and the status keeps reporting the generation the sync read
// (p.observed). So an image patched and patched back while the pod's sync works on another
// container never restarts its container.
func (p *podSim) advanceLive(pod *corev1.Pod, secrets []string, now time.Time, t timings, reg *registry) []*liveContainer {
	var lives []*liveContainer
	add := func(sims map[string]*containerSim, spec corev1.Container, sidecar bool) {
		c := sims[spec.Name]
		if c == nil {
			c = &containerSim{name: spec.Name}
			sims[spec.Name] = c
		}
		c.env = pullEnv{node: p.node, namespace: pod.Namespace, pullSecrets: secrets, policy: spec.ImagePullPolicy}
		c.pod = fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
		c.allocated = p.allocated[spec.Name]
		c.quiet = sidecar && spec.ReadinessProbe == nil && spec.StartupProbe == nil
		lives = append(lives, &liveContainer{c: c, spec: spec, sidecar: sidecar})
	}
	for _, spec := range pod.Spec.Containers {
		add(p.containers, spec, false)
	}
	for _, spec := range pod.Spec.InitContainers {
		if nativeSidecar(spec) {
			add(p.sidecars, spec, true)
		}
	}

	advance := func(l *liveContainer, to time.Time, hold bool) {
		l.next = l.c.advance(to, l.spec.Image, crashesHere(pod, l.spec.Image), hold, withPreStop(t, l.spec), reg)
	}
	if !syncing(lives) {
		// No sync is underway: this one reads the newest spec, at once.
		p.readSpec(pod, lives)
		for _, l := range lives {
			advance(l, now, false)
		}
		resizeLive(lives, now, t)
		for _, l := range lives {
			advance(l, now, false)
		}
		p.observed = pod.Generation
		return lives
	}
	// The containers in the sync go first: each stops where its part of the sync ends.
	for _, l := range lives {
		if l.c.inSync() {
			advance(l, now, true)
		}
	}
	end, ended := syncEnd(lives)
	if ended {
		// Every container up to the sync's end; one whose back-off ran out meanwhile started a
		// sync of its own, which the pod waits for in turn.
		for _, l := range lives {
			advance(l, end, true)
		}
		ended = !syncing(lives)
	}
	if !ended {
		for _, l := range lives {
			advance(l, now, true)
		}
		return lives
	}
	// The next sync reads the newest spec, from when the one before ended.
	p.readSpec(pod, lives)
	for _, l := range lives {
		if l.spec.Image != l.c.specImage {
			l.c.follow(end, l.spec.Image, crashesHere(pod, l.spec.Image), withPreStop(t, l.spec), reg)
		}
	}
	resizeLive(lives, end, t)
	for _, l := range lives {
		advance(l, now, false)
	}
	p.observed = pod.Generation
	return lives
}

// syncing reports whether a sync of the pod is underway: a container is stopped for a new spec
// image, or one is pulled to start. A container not yet seen is not: the first sync creates it.
func syncing(lives []*liveContainer) bool {
	for _, l := range lives {
		if !l.c.since.IsZero() && l.c.inSync() {
			return true
		}
	}
	return false
}

// syncEnd is when the pod's latest sync ended, and whether it has: no container is in one.
func syncEnd(lives []*liveContainer) (time.Time, bool) {
	if syncing(lives) {
		return time.Time{}, false
	}
	var end time.Time
	for _, l := range lives {
		if l.c.syncEnded.After(end) {
			end = l.c.syncEnded
		}
	}
	return end, true
}

// creatingSandbox is the status of a pod whose sandbox is not set up yet: Pending, every
// container waiting in ContainerCreating.
func (p *podSim) creatingSandbox(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	p.observed = pod.Generation
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, spec := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: spec.Name, Image: spec.Image, Started: ptr(false),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	}
	return p.render(pod, now, corev1.PodPending, statuses, nil, false, false)
}

func pullSecretsOf(pod *corev1.Pod) []string {
	var secrets []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		secrets = append(secrets, ref.Name)
	}
	return secrets
}

// render is the status the kubelet reports for a pod in phase with these container statuses:
// addresses, start time, observed generation and conditions.
func (p *podSim) render(pod *corev1.Pod, now time.Time, phase corev1.PodPhase, statuses, initStatuses []corev1.ContainerStatus, initialized, allReady bool) corev1.PodStatus {
	gatesReady := true
	for _, gate := range pod.Spec.ReadinessGates {
		if !conditionTrue(pod.Status.Conditions, gate.ConditionType) {
			gatesReady = false
		}
	}
	p.ready = allReady && gatesReady

	status := *pod.Status.DeepCopy()
	status.Phase, p.phase = phase, phase
	status.HostIP, status.PodIP = p.hostIP, p.podIP
	status.HostIPs = []corev1.HostIP{{IP: p.hostIP}}
	status.PodIPs = []corev1.PodIP{{IP: p.podIP}}
	status.StartTime = ptr(rfc3339(p.startTime))
	// As a v1.34 kubelet does (KEP-5067): the spec generation the latest sync read.
	status.ObservedGeneration = p.observed
	status.ContainerStatuses = statuses
	status.InitContainerStatuses = initStatuses

	notReady := "ContainersNotReady"
	if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		notReady = "PodCompleted"
	}
	containersReady := condition(corev1.ContainersReady, allReady, notReady)
	podReady := condition(corev1.PodReady, p.ready, notReady)
	if allReady && !gatesReady {
		podReady.Reason = "ReadinessGatesNotReady"
	}
	for _, c := range []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, true, ""),
		condition(corev1.PodInitialized, initialized, "ContainersNotInitialized"),
		containersReady,
		podReady,
		condition(corev1.PodScheduled, true, ""),
	} {
		status.Conditions = setCondition(status.Conditions, c, now)
	}
	status.Conditions = p.resizeConditions(status.Conditions, pod.Status.Conditions, now)
	return status
}

// CrashImagesAnnotation lists, comma-separated, images that crash-loop in this pod whatever
// their tag: a fault injected into one pod of a workload whose pods share a template.
const CrashImagesAnnotation = "kubeletsim.inplace-rollout.io/crash-images"

func crashesHere(pod *corev1.Pod, image string) bool {
	for _, img := range strings.Split(pod.Annotations[CrashImagesAnnotation], ",") {
		if strings.TrimSpace(img) == image {
			return true
		}
	}
	return false
}

func condition(t corev1.PodConditionType, ok bool, reasonIfNot string) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	if !ok {
		c.Status, c.Reason = corev1.ConditionFalse, reasonIfNot
	}
	return c
}

// setCondition replaces the condition of c's type, keeping its transition time when the status
// did not change.
func setCondition(conds []corev1.PodCondition, c corev1.PodCondition, now time.Time) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime = conds[i].LastTransitionTime
		if conds[i].Status != c.Status {
			c.LastTransitionTime = rfc3339(now)
		}
		conds[i] = c
		return conds
	}
	c.LastTransitionTime = rfc3339(now)
	return append(conds, c)
}

func conditionTrue(conds []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ownConditions are the condition types the simulated kubelet writes; others (readiness gates)
// belong to other writers and are left alone.
var ownConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true,
	corev1.PodInitialized:            true,
	corev1.ContainersReady:           true,
	corev1.PodReady:                  true,
	corev1.PodScheduled:              true,
	corev1.PodResizePending:          true,
	corev1.PodResizeInProgress:       true,
}

// ownConditionsPatch is the strategic-merge patch of the conditions list that takes the pod's
// own conditions from old to conds: those of conds, and a delete of each own one old has and
// conds has not, as the kubelet drops a resize condition once the resize is done.
func ownConditionsPatch(old, conds []corev1.PodCondition) []any {
	out := []any{}
	for _, c := range conds {
		if ownConditions[c.Type] {
			out = append(out, c)
		}
	}
	for _, o := range old {
		if ownConditions[o.Type] && !slices.ContainsFunc(conds, func(c corev1.PodCondition) bool { return c.Type == o.Type }) {
			out = append(out, map[string]any{"type": o.Type, "$patch": "delete"})
		}
	}
	return out
}

// withPreStop is t with the stop lasting at least the container's preStop sleep: the kubelet
// runs the hook before it sends the container SIGTERM, and the container runs, Ready, meanwhile.
func withPreStop(t timings, spec corev1.Container) timings {
	if l := spec.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		t.stop = max(t.stop, time.Duration(l.PreStop.Sleep.Seconds)*time.Second)
	}
	return t
}
