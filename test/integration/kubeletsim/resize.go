package kubeletsim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// nodeAllocatable is every simulated node's capacity and allocatable: what a pod's resize is
// measured against.
var nodeAllocatable = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("16"),
	corev1.ResourceMemory: resource.MustParse("64Gi"),
	corev1.ResourcePods:   resource.MustParse("1000"),
}

// The resize conditions' reasons (kubelet v1.34, allocation_manager.go).
const (
	ResizeInfeasible = corev1.PodReasonInfeasible
	ResizeDeferred   = corev1.PodReasonDeferred
)

// resizeCondition is a PodResizePending or PodResizeInProgress condition the kubelet holds for a
// pod: its reason and message, and the generation of the spec it judged.
type resizeCondition struct {
	reason, message string
	generation      int64
}

// allocationOf is the resources the kubelet allocates a pod from its spec: those of its
// containers and native sidecars, by name (allocation_manager.go allocationFromPod).
func allocationOf(pod *corev1.Pod) map[string]corev1.ResourceRequirements {
	out := map[string]corev1.ResourceRequirements{}
	for _, c := range pod.Spec.Containers {
		out[c.Name] = *c.Resources.DeepCopy()
	}
	for _, c := range pod.Spec.InitContainers {
		if nativeSidecar(c) {
			out[c.Name] = *c.Resources.DeepCopy()
		}
	}
	return out
}

// adoptedAllocation rebuilds a pod's allocation from the status an earlier simulator wrote:
// the resources each container reported, which are those it was allocated unless a resize was
// underway, which the next sync then accepts again.
func adoptedAllocation(pod *corev1.Pod) map[string]corev1.ResourceRequirements {
	alloc := allocationOf(pod)
	for _, sts := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, st := range sts {
			if _, ok := alloc[st.Name]; ok && st.Resources != nil {
				alloc[st.Name] = *st.Resources.DeepCopy()
			}
		}
	}
	return alloc
}

// podRequests is a pod's cpu (millicores) and memory (bytes) requests as the kubelet counts them
// (component-helpers resource.PodRequests): its containers and native sidecars together, or an
// init container with the sidecars started before it when that is more, plus the overhead.
// alloc, when not nil, replaces the requests of the containers and sidecars it names.
func podRequests(pod *corev1.Pod, alloc map[string]corev1.ResourceRequirements) (cpu, memory int64) {
	requests := func(c corev1.Container) (int64, int64) {
		r := c.Resources.Requests
		if a, ok := alloc[c.Name]; ok {
			r = a.Requests
		}
		return r.Cpu().MilliValue(), r.Memory().Value()
	}
	for _, c := range pod.Spec.Containers {
		c, m := requests(c)
		cpu, memory = cpu+c, memory+m
	}
	var sidecarCPU, sidecarMem, initCPU, initMem int64
	for _, c := range pod.Spec.InitContainers {
		c0, m0 := requests(c)
		if nativeSidecar(c) {
			cpu, memory = cpu+c0, memory+m0
			sidecarCPU, sidecarMem = sidecarCPU+c0, sidecarMem+m0
			c0, m0 = sidecarCPU, sidecarMem
		} else {
			c0, m0 = c0+sidecarCPU, m0+sidecarMem
		}
		initCPU, initMem = max(initCPU, c0), max(initMem, m0)
	}
	cpu, memory = max(cpu, initCPU), max(memory, initMem)
	if o := pod.Spec.Overhead; o != nil {
		if cpu > 0 {
			cpu += o.Cpu().MilliValue()
		}
		if memory > 0 {
			memory += o.Memory().Value()
		}
	}
	return cpu, memory
}

// admitResize is the kubelet's handlePodResourcesResize on a sync that reads pod's spec: a spec
// whose resources differ from the allocation is allocated when it fits the node, and is left
// pending otherwise (PodResizePending Infeasible or Deferred), the allocation as it was. It
// reports whether a resize was allocated.
func (p *podSim) admitResize(pod *corev1.Pod) bool {
	if p.allocated == nil {
		p.allocated = allocationOf(pod)
		return false
	}
	want := allocationOf(pod)
	if equality.Semantic.DeepEqual(want, p.allocated) {
		p.pending = nil
		return false
	}
	if reason, msg := p.resizeFits(pod); reason != "" {
		p.pending = &resizeCondition{reason: reason, message: msg, generation: pod.Generation}
		return false
	}
	p.allocated, p.pending = want, nil
	p.inProgress = &resizeCondition{generation: pod.Generation}
	return true
}

// resizeFits is the kubelet's canResizePod: a pod whose requests exceed the node's allocatable
// can never be resized (Infeasible, memory named first); one that exceeds what the node's other
// pods leave free waits for them (Deferred, cpu named first, as the admission predicate does).
// It returns no reason when the resize fits.
func (p *podSim) resizeFits(pod *corev1.Pod) (reason, message string) {
	cpu, memory := podRequests(pod, nil)
	capCPU, capMem := nodeAllocatable.Cpu().MilliValue(), nodeAllocatable.Memory().Value()
	switch {
	case memory > capMem:
		return ResizeInfeasible, fmt.Sprintf("Node didn't have enough capacity: memory, requested: %d, capacity: %d", memory, capMem)
	case cpu > capCPU:
		return ResizeInfeasible, fmt.Sprintf("Node didn't have enough capacity: cpu, requested: %d, capacity: %d", cpu, capCPU)
	}
	var usedCPU, usedMem int64
	if p.others != nil {
		usedCPU, usedMem = p.others()
	}
	switch {
	case cpu > 0 && cpu > capCPU-usedCPU:
		return ResizeDeferred, fmt.Sprintf("Node didn't have enough resource: cpu, requested: %d, used: %d, capacity: %d", cpu, usedCPU, capCPU)
	case memory > 0 && memory > capMem-usedMem:
		return ResizeDeferred, fmt.Sprintf("Node didn't have enough resource: memory, requested: %d, used: %d, capacity: %d", memory, usedMem, capMem)
	}
	return "", ""
}

// readSpec is what a sync that reads pod's spec does first: it admits a resize and hands each
// live container its allocation.
func (p *podSim) readSpec(pod *corev1.Pod, lives []*liveContainer) {
	if p.admitResize(pod) {
		p.resized = true
	}
	for _, l := range lives {
		l.c.allocated = p.allocated[l.spec.Name]
	}
}

// resizeLive acts at the given time on the allocation of each running container whose spec
// image it already runs (one whose image changes starts again with its allocation): as kubelet
// v1.34's computePodResizeAction, it restarts the container when a resource that changed has
// the resizePolicy RestartContainer, and otherwise updates it in place, which the status shows
// after the resize delay. A container that is not running starts with its allocation.
func resizeLive(lives []*liveContainer, at time.Time, t timings) {
	for _, l := range lives {
		c := l.c
		if c.phase != phaseStarting && c.phase != phaseReady || l.spec.Image != c.specImage {
			continue
		}
		if sameResources(c.actuated, c.allocated) {
			c.resizeAt = time.Time{}
			continue
		}
		if restartToResize(l.spec, c.actuated, c.allocated) {
			c.restartForResize(at)
			continue
		}
		c.resizeTo = *c.allocated.DeepCopy()
		if c.resizeAt.IsZero() {
			c.resizeAt = at.Add(t.resize)
		}
	}
}

// resizing reports whether a running container runs with other resources than it was
// allocated: the kubelet's PodResizeInProgress holds until none does (isPodResizeInProgress).
func resizing(lives []*liveContainer) bool {
	for _, l := range lives {
		if l.c.running() && !sameResources(l.c.actuated, l.c.allocated) {
			return true
		}
	}
	return false
}

// resizable are the resources a resize can change.
var resizable = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// sameResources compares the cpu and memory requests and limits, the resources a resize changes.
func sameResources(a, b corev1.ResourceRequirements) bool {
	for _, name := range resizable {
		if a.Requests.Name(name, resource.DecimalSI).Cmp(*b.Requests.Name(name, resource.DecimalSI)) != 0 ||
			a.Limits.Name(name, resource.DecimalSI).Cmp(*b.Limits.Name(name, resource.DecimalSI)) != 0 {
			return false
		}
	}
	return true
}

// restartToResize reports whether going from the resources from to to restarts the container:
// a resource that changes has the resizePolicy RestartContainer. Without a policy for a
// resource the kubelet takes NotRequired.
func restartToResize(spec corev1.Container, from, to corev1.ResourceRequirements) bool {
	for _, name := range resizable {
		if from.Requests.Name(name, resource.DecimalSI).Cmp(*to.Requests.Name(name, resource.DecimalSI)) == 0 &&
			from.Limits.Name(name, resource.DecimalSI).Cmp(*to.Limits.Name(name, resource.DecimalSI)) == 0 {
			continue
		}
		for _, policy := range spec.ResizePolicy {
			if policy.ResourceName == name && policy.RestartPolicy == corev1.RestartContainer {
				return true
			}
		}
	}
	return false
}

// resizeConditions replaces the resize conditions in conds with those the kubelet holds: a
// condition keeps the times the pod's status has for it while its reason stays the same.
func (p *podSim) resizeConditions(conds, old []corev1.PodCondition, now time.Time) []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, c := range conds {
		if c.Type != corev1.PodResizePending && c.Type != corev1.PodResizeInProgress {
			out = append(out, c)
		}
	}
	for _, rc := range []struct {
		t corev1.PodConditionType
		c *resizeCondition
	}{{corev1.PodResizePending, p.pending}, {corev1.PodResizeInProgress, p.inProgress}} {
		if rc.c == nil {
			continue
		}
		c := corev1.PodCondition{
			Type: rc.t, Status: corev1.ConditionTrue, ObservedGeneration: rc.c.generation,
			Reason: rc.c.reason, Message: rc.c.message,
			LastProbeTime: rfc3339(now), LastTransitionTime: rfc3339(now),
		}
		for _, o := range old {
			if o.Type == rc.t && o.Reason == c.Reason {
				c.LastProbeTime, c.LastTransitionTime = o.LastProbeTime, o.LastTransitionTime
			}
		}
		out = append(out, c)
	}
	return out
}
