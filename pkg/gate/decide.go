package gate

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// Decide reports whether the controller sets the readiness gate condition True on pod, and why
// (or why not). It sets it only on a pod that declares the gate, is not being deleted, has no
// such condition yet, and is not in the middle of an in-place update: no state annotation, or
// one whose stage is Updated or RolledBack. Once the condition exists the engine owns it, so
// the controller never changes it and never races the engine's drain.
func Decide(pod *corev1.Pod) (set bool, reason string) {
	if !declaresGate(pod) {
		return false, "the pod does not declare the readiness gate " + string(inplace.ReadinessGate)
	}
	if pod.DeletionTimestamp != nil {
		return false, "the pod is being deleted"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == inplace.ReadinessGate {
			return false, fmt.Sprintf("the condition is already set (%s)", c.Status)
		}
	}
	st, err := inplace.ReadState(pod)
	if err != nil {
		return false, err.Error()
	}
	if st == nil {
		return true, "no in-place update recorded"
	}
	switch st.Stage {
	case inplace.StageUpdated, inplace.StageRolledBack:
		return true, fmt.Sprintf("its last in-place update ended (%s)", st.Stage)
	default:
		// Failed waits for its revert; the engine decides when such a pod comes back. ReadState
		// refused any stage this version does not write.
		return false, fmt.Sprintf("in the middle of an in-place update (stage %s)", st.Stage)
	}
}

func declaresGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == inplace.ReadinessGate {
			return true
		}
	}
	return false
}
