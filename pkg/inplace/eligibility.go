package inplace

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// IneligibleError says why a pod cannot be updated in place now. Wait is true when the reason
// is expected to pass (the pod is not scheduled or running yet); false when it will not.
type IneligibleError struct {
	Pod    string
	Reason string
	Wait   bool
	// ImageIDPending: the only reason is a container to change that has not reported an
	// imageID yet; the update records its state first and patches once it has.
	ImageIDPending bool
}

func (e *IneligibleError) Error() string {
	return fmt.Sprintf("pod %s cannot be updated in place: %s", e.Pod, e.Reason)
}

// IsWait reports whether err is an IneligibleError that should pass with time.
func IsWait(err error) bool {
	var e *IneligibleError
	return errors.As(err, &e) && e.Wait
}

// CanUpdate reports whether the pod can have the plan's images changed in place now. Pods being
// deleted or with a restartPolicy other than Always are refused; pods not yet scheduled or
// Running, or whose container to change has not reported an imageID, wait.
func CanUpdate(pod *corev1.Pod, plan Plan) error {
	if err := podRefusal(pod); err != nil {
		return err
	}
	who := pod.Namespace + "/" + pod.Name
	for _, c := range plan.Changes {
		cs := containerStatus(pod, c.Container, c.Init)
		if cs == nil {
			return &IneligibleError{Pod: who, Reason: fmt.Sprintf("container %q has no status yet", c.Container), Wait: true}
		}
		// A container that never ran because it is failing will never report an imageID; it
		// can still be updated (to fix it), with no digest to return to.
		if cs.ImageID == "" && failingReason(cs) == "" {
			return &IneligibleError{Pod: who, Reason: fmt.Sprintf("container %q has not reported an imageID yet", c.Container), Wait: true, ImageIDPending: true}
		}
	}
	return nil
}

// podRefusal is CanUpdate's refusal of the pod as a whole, whatever its plan, or nil.
func podRefusal(pod *corev1.Pod) *IneligibleError {
	refuse := func(reason string, wait bool) *IneligibleError {
		return &IneligibleError{Pod: pod.Namespace + "/" + pod.Name, Reason: reason, Wait: wait}
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return refuse("it is being deleted", false)
	case pod.Spec.RestartPolicy != "" && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways:
		return refuse(fmt.Sprintf("its restartPolicy is %s; only Always restarts a container on an image change", pod.Spec.RestartPolicy), false)
	case pod.Spec.NodeName == "":
		return refuse("it is not scheduled to a node yet", true)
	case pod.Status.Phase != corev1.PodRunning:
		return refuse(fmt.Sprintf("it is %s, not Running", phaseOrUnknown(pod.Status.Phase)), true)
	}
	return nil
}

func phaseOrUnknown(p corev1.PodPhase) string {
	if p == "" {
		return "in no phase yet"
	}
	return string(p)
}

func containerStatus(pod *corev1.Pod, name string, init bool) *corev1.ContainerStatus {
	statuses := pod.Status.ContainerStatuses
	if init {
		statuses = pod.Status.InitContainerStatuses
	}
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

func containerSpec(pod *corev1.Pod, name string, init bool) *corev1.Container {
	specs := pod.Spec.Containers
	if init {
		specs = pod.Spec.InitContainers
	}
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

// hasReadinessGate reports whether the pod declares the inplace-rollout.io/ready gate.
func hasReadinessGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == ReadinessGate {
			return true
		}
	}
	return false
}
