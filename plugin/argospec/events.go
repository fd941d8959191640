package argospec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// EventInvalidConfig is the reason of the Warning Event a plugin records on a Rollout whose
// config it cannot read.
const EventInvalidConfig = "InvalidConfig"

// maxNameLen is the longest name an Event, like any object, may have.
const maxNameLen = 253

// RecordOnce records a Warning Event with reason and message on the Rollout ro, once per
// generation of ro: the Event's name is derived from the Rollout's UID, its generation and the
// reason, so a repeated call, from this process or from one started after it, finds it there
// and records nothing. Argo owns the Rollout's status and conditions; an Event is what a plugin
// can add to what `kubectl describe rollout` shows. It reports whether it created the Event.
func RecordOnce(ctx context.Context, client kubernetes.Interface, ro *argov1alpha1.Rollout, component, reason, message string) (bool, error) {
	event := rollout.NewEvent(eventName(ro, reason), corev1.ObjectReference{
		Kind: "Rollout", APIVersion: argov1alpha1.SchemeGroupVersion.String(),
		Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, ResourceVersion: ro.ResourceVersion,
	}, rollout.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: message}, component, metav1.NewTime(time.Now()))
	_, err := client.CoreV1().Events(ro.Namespace).Create(ctx, event, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("recording Event %s on Rollout %s/%s: %w", reason, ro.Namespace, ro.Name, err)
	}
	return true, nil
}

// eventName is NAME.HASH, HASH naming the Rollout's UID, generation and the reason: a Rollout
// deleted and created again under its name gets Events of its own.
func eventName(ro *argov1alpha1.Rollout, reason string) string {
	sum := sha256.Sum256([]byte(string(ro.UID) + "|" + strconv.FormatInt(ro.Generation, 10) + "|" + reason))
	suffix := "." + hex.EncodeToString(sum[:])[:16]
	name := ro.Name
	if len(name) > maxNameLen-len(suffix) {
		// A label of the name may not end in - or . once cut.
		name = strings.TrimRight(name[:maxNameLen-len(suffix)], "-.")
	}
	return name + suffix
}
