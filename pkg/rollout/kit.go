package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// What a driver needs to name workloads, pods and Events, so that drivers reach the cluster
// through this package only: pkg/workload and pkg/inplace stay the engine's.

// Ref names a workload: a StatefulSet, DaemonSet or Deployment by name, or pods by a label
// selector.
type Ref = workload.Ref

// Kind is the kind of workload a Ref names.
type Kind = workload.Kind

// Workload kinds.
const (
	StatefulSet = workload.StatefulSet
	DaemonSet   = workload.DaemonSet
	Deployment  = workload.Deployment
	// Pods are the pods a label selector selects, with no controller of theirs involved.
	Pods = workload.Pods
)

// ParseKind reads a workload kind, in any case; its error names the kinds there are.
func ParseKind(s string) (Kind, error) { return workload.ParseKind(s) }

// DefaultProgressDeadline is the progress deadline (Spec.Timeout) of a spec that gives none.
const DefaultProgressDeadline = inplace.DefaultProgressDeadline

// NativeSidecar reports whether c is a native sidecar: an init container with restartPolicy
// Always, whose image a spec may always name.
func NativeSidecar(c corev1.Container) bool { return inplace.NativeSidecar(c) }

// Event is an Event's type, reason and message.
type Event = inplace.Event

// NewEvent is the Event ev of component about the object ref, named name in ref's namespace,
// seen once at now: a driver's Events on its own objects have the shape of the engine's on pods.
func NewEvent(name string, ref corev1.ObjectReference, ev Event, component string, now metav1.Time) *corev1.Event {
	return inplace.NewEvent(name, ref, ev, component, now)
}

// EventRecorder records the engine's Events about pods (Engine.Events).
type EventRecorder = inplace.EventRecorder

// EventBroadcaster records the Events of one process through client-go's events library, in
// the background; its Recorder of a component is what Engine.Events takes. Close it before the
// process exits, so that the Events still due are written.
type EventBroadcaster = inplace.EventBroadcaster

// NewEventBroadcaster starts recording Events through client; onErr gets each Event write that
// failed.
func NewEventBroadcaster(client kubernetes.Interface, onErr func(error)) (*EventBroadcaster, error) {
	return inplace.NewEventBroadcaster(client, onErr)
}

// PodLister lists the pods of a namespace that a selector selects (Engine.Pods).
type PodLister = workload.PodLister

// PodWatch is a watch of a workload's pods: Changes, what Driver.Changes takes, so that a driver
// steps as soon as the pods change (a hint, never a fact a step relies on), and a PodLister
// answering from the watch's cache, what Engine.Pods takes.
type PodWatch = workload.PodWatch

// WatchPods watches the pods of the workload ref until ctx ends. Its error (the workload cannot
// be read, or its pods watched) leaves the driver stepping at the engine's intervals, reading
// the pods from the API server.
func WatchPods(ctx context.Context, client kubernetes.Interface, ref Ref) (*PodWatch, error) {
	w, err := workload.Load(ctx, client, ref)
	if err != nil {
		return nil, fmt.Errorf("reading %s to watch its pods: %w", ref, err)
	}
	return workload.WatchPods(ctx, client, ref.Namespace, w.PodSelector())
}
