package inplace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// EventRecorder records Events about pods.
type EventRecorder interface {
	Record(ctx context.Context, pod *corev1.Pod, ev Event) error
}

// ClientEventRecorder writes core/v1 Events through the API, synchronously, so a short-lived
// command loses none when it exits.
type ClientEventRecorder struct {
	Client kubernetes.Interface
	// Component is the event source [inplace-rollout].
	Component string
}

// Record creates one Event on the pod.
func (r ClientEventRecorder) Record(ctx context.Context, pod *corev1.Pod, ev Event) error {
	component := r.Component
	if component == "" {
		component = "inplace-rollout"
	}
	now := metav1.NewTime(time.Now())
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
			Namespace: pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
		Reason:              ev.Reason,
		Message:             ev.Message,
		Type:                ev.Type,
		Source:              corev1.EventSource{Component: component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "inplace-rollout.io/" + component,
		ReportingInstance:   component,
	}
	if _, err := r.Client.CoreV1().Events(pod.Namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording event %s on pod %s/%s: %w", ev.Reason, pod.Namespace, pod.Name, err)
	}
	return nil
}
