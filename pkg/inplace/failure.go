package inplace

import (
	"slices"
	"strings"
)

// FailureCode says, as a code, why a container's update (or its revert) failed; the state's
// Reason says it in words, for people. Callers decide on the code, never on the words.
type FailureCode string

// Failure codes, one for each way a pod's update fails.
const (
	// FailureImagePull: the kubelet cannot pull the image (ImagePullBackOff, ErrImageNeverPull,
	// InvalidImageName).
	FailureImagePull FailureCode = "ImagePull"
	// FailureCrashLoop: the container crashes and the kubelet backs off (CrashLoopBackOff).
	FailureCrashLoop FailureCode = "CrashLoop"
	// FailureConfigError: the kubelet cannot make the container's configuration: a Secret or
	// ConfigMap it names is missing (CreateContainerConfigError).
	FailureConfigError FailureCode = "ConfigError"
	// FailureContainerError: the runtime cannot create or start the container
	// (CreateContainerError, RunContainerError).
	FailureContainerError FailureCode = "ContainerError"
	// FailureRestartClimb: the container's restart count climbed past the one restart the
	// update causes.
	FailureRestartClimb FailureCode = "RestartClimb"
	// FailureDeadlineExceeded: no progress within the progress deadline.
	FailureDeadlineExceeded FailureCode = "DeadlineExceeded"
	// FailureContainerGone: a container the update changes is gone from the pod spec.
	FailureContainerGone FailureCode = "ContainerGone"
	// FailureResizeInfeasible: the kubelet says the node can never fit the new resources
	// (PodResizePending, reason Infeasible).
	FailureResizeInfeasible FailureCode = "ResizeInfeasible"
	// FailureResizeError: the kubelet failed to apply the new resources (PodResizeInProgress,
	// reason Error).
	FailureResizeError FailureCode = "ResizeError"
	// FailureHook: a preUpdate or postUpdate hook failed, timed out or was interrupted, and its
	// onFailure is Fail.
	FailureHook FailureCode = "HookFailed"
)

// knownFailures are the codes this version writes.
var knownFailures = []FailureCode{FailureImagePull, FailureCrashLoop, FailureConfigError, FailureContainerError,
	FailureRestartClimb, FailureDeadlineExceeded, FailureContainerGone, FailureResizeInfeasible, FailureResizeError, FailureHook}

// Known reports whether the code is one this version writes.
func (c FailureCode) Known() bool { return slices.Contains(knownFailures, c) }

// waitingFailures are the kubelet's waiting reasons that mean a container will not come up
// without a change, with their codes. ErrImagePull is not one: the kubelet retries a failed pull
// once before it backs off, and a pull that fails again shows as ImagePullBackOff.
var waitingFailures = map[string]FailureCode{
	"ImagePullBackOff":           FailureImagePull,
	"ErrImageNeverPull":          FailureImagePull,
	"InvalidImageName":           FailureImagePull,
	"CrashLoopBackOff":           FailureCrashLoop,
	"CreateContainerConfigError": FailureConfigError,
	"CreateContainerError":       FailureContainerError,
	"RunContainerError":          FailureContainerError,
}

// FailureCode is the code of a Failed state: the one it records, or, for a state written before
// states recorded one, the code its reason starts with (see legacyFailure).
func (s *State) FailureCode() FailureCode {
	if s.Failure != "" {
		return s.Failure
	}
	return legacyFailure(s.Reason)
}

// legacyFailure reads the code of a Failed state written before states recorded one from the
// start of its reason, where those versions put the kubelet's waiting reason or their own
// marker; "" when the reason starts with neither (a failed revert's reason starts "rollback
// failed: "). States written since carry their code, so no other reason is ever read for one.
func legacyFailure(reason string) FailureCode {
	first, _, _ := strings.Cut(reason, ":")
	switch {
	case strings.HasPrefix(reason, "ProgressDeadlineExceeded"):
		return FailureDeadlineExceeded
	case first == "RestartCountClimbing":
		return FailureRestartClimb
	case waitingFailures[first] != "":
		return waitingFailures[first]
	case strings.HasPrefix(reason, "container ") && strings.HasSuffix(first, " is gone from the pod spec"):
		return FailureContainerGone
	}
	return ""
}
