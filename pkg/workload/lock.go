package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// LockAnnotation holds a workload's Lock as JSON.
const LockAnnotation = "inplace-rollout.io/rollout"

// Lock phases.
const (
	LockProgressing = "Progressing"
	// LockPaused: an analysis was inconclusive; a person resumes or rolls back.
	LockPaused      = "Paused"
	LockRollingBack = "RollingBack"
	LockSucceeded   = "Succeeded"
	LockRolledBack  = "RolledBack"
)

// LockHalted: someone else changed the workload's template while the rollout held it. The
// rollout stopped where it was, rolled nothing back and keeps the workload frozen until a person
// decides: roll back, or put the rollout's images back in the template and run again.
const LockHalted = "Halted"

// LockHolding: the rollout reached its hold point (a pod count short of all) and waits, the
// workload still held, until its holder asks it to go further or rolls it back.
const LockHolding = "Holding"

// LockReleased: the holder let go of the rollout part way, as versions before full promotion went
// in place did on Argo's full promotion. Such a lock is still read: like a finished rollout, it no
// longer holds the workload, and it stays the record of the last rollout for `rollback` and
// `status`. No version writes it any more.
const LockReleased = "Released"

// Lock is the record of a rollout on its workload: who runs it, what it changes and what to put
// back. While its phase is Progressing or RollingBack the workload belongs to the holder; a
// finished lock stays as the record of the last rollout, for `rollback` and `status`.
type Lock struct {
	// Holder names who runs the rollout: cli, argo:NS/NAME, tekton:NS/NAME.
	Holder string `json:"holder"`
	// HolderUID is the UID of the object named by Holder (the Argo Rollout, the CustomRun), so
	// that an object deleted and created again under the same name is not taken for the one that
	// started the rollout. Empty for the CLI, and in locks written before it existed.
	HolderUID types.UID `json:"holderUID,omitempty"`
	// RolloutID identifies the rollout on the pods' state annotations.
	RolloutID string `json:"rolloutID"`
	// SpecHash is the hash of the rollout's target and images.
	SpecHash string `json:"specHash"`
	// Images are the target images by container.
	Images map[string]string `json:"images"`
	// PreviousImages are the template images before the first of the rollouts chained by
	// superseding, by container.
	PreviousImages map[string]string `json:"previousImages"`
	// BeforeImages are the distinct images, by container, that the template and the pods ran
	// when the rollout started (a few per container, bounded): the only images a revert may put
	// back. Locks written before this field have none; PreviousImages then stands for them.
	BeforeImages map[string][]string `json:"beforeImages,omitempty"`
	// PreviousStrategy is the workload's update strategy before the rollout (StatefulSet and
	// DaemonSet: spec.updateStrategy; Deployment: {"paused": bool}).
	PreviousStrategy json.RawMessage `json:"previousStrategy,omitempty"`
	// Superseded lists the IDs of earlier rollouts this one replaced while they were in flight.
	Superseded []string `json:"superseded,omitempty"`
	// Touched names the pods the rollout, and those it superseded, set out to update, each
	// recorded before its first write, up to a cap (see rollout); TouchedMore counts the pods
	// updated beyond it. A rollback checks them, so that a touched pod it cannot find by its state
	// (the annotation removed, the pod gone to another owner) is reported, not passed over.
	Touched     []TouchedPod `json:"touched,omitempty"`
	TouchedMore int          `json:"touchedMore,omitempty"`
	Phase       string       `json:"phase"`
	// Reason says why the rollout is rolling back, rolled back, paused or halted, in words.
	Reason string `json:"reason,omitempty"`
	// ReasonCode is the same as a code (rollout.Reason: PodFailed, TemplateChanged, ...). Locks
	// written before it existed have none; their Reason still reads.
	ReasonCode string    `json:"reasonCode,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	// ProgressAt is when the rollout last moved on in a way no pod records: a batch passed its
	// analysis, or was accepted after a pause. A batch whose pods make no progress fails its
	// deadline counted from the latest of this, StartedAt and the pods' stage times.
	ProgressAt time.Time `json:"progressAt,omitzero"`
	// AcceptedPods is the updated pod count up to which batches passed their analysis (or were
	// accepted after an inconclusive one). A count, not a batch index, so that a changed batch
	// list, a hold point or a scale changes which batch is next but never repeats or skips an
	// analysis.
	AcceptedPods int `json:"acceptedPods,omitempty"`
	// AcceptedAll says the batch of every pod passed its analysis (or was accepted), so that a
	// workload scaled down below AcceptedPods still has its last batch analysed when it did not.
	AcceptedAll bool `json:"acceptedAll,omitempty"`
	// HeldAt is the hold point, as a pod count, while the phase is Holding.
	HeldAt int `json:"heldAt,omitempty"`
	// Analysis is the state of the analysis in progress or last finished, as the analysis
	// package encodes it.
	Analysis json.RawMessage `json:"analysis,omitempty"`
}

// TouchedPod is a pod a rollout set out to update: by name, to report it, and UID, so that a pod
// recreated under the same name is not taken for it.
type TouchedPod struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Active reports whether the lock still holds the workload.
func (l *Lock) Active() bool {
	return l != nil && (l.Phase == LockProgressing || l.Phase == LockPaused || l.Phase == LockRollingBack || l.Phase == LockHalted || l.Phase == LockHolding)
}

func parseLock(kind Kind, ns, name string, annotations map[string]string) (*Lock, error) {
	raw, ok := annotations[LockAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	var l Lock
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		return nil, &LockError{Kind: kind, Namespace: ns, Name: name, Err: err, JSON: true}
	}
	if err := l.check(); err != nil {
		return nil, &LockError{Kind: kind, Namespace: ns, Name: name, Err: err}
	}
	return &l, nil
}

// LockError is a lock annotation that cannot be read: not JSON, or JSON of a shape no version
// writes (someone edited it by hand). No retry fixes it, and acting on it could undo the wrong
// images or strategy, so callers stop, write nothing and say which object.
type LockError struct {
	Kind            Kind
	Namespace, Name string
	Err             error
	// JSON says the annotation is not JSON at all; otherwise a field is wrong, as Err says.
	JSON bool
}

func (e *LockError) Error() string {
	if e.JSON {
		return fmt.Sprintf("%s %s/%s: annotation %s is not valid JSON: %v", e.Kind, e.Namespace, e.Name, LockAnnotation, e.Err)
	}
	return fmt.Sprintf("%s %s/%s: annotation %s is not a lock this version writes: %v", e.Kind, e.Namespace, e.Name, LockAnnotation, e.Err)
}

func (e *LockError) Unwrap() error { return e.Err }

// check refuses a decoded lock that no version writes: an unknown phase, a negative count, an
// image that is not a reference, a recorded strategy that is not an object. Each error names
// the field.
func (l *Lock) check() error {
	switch l.Phase {
	case LockProgressing, LockPaused, LockRollingBack, LockSucceeded, LockRolledBack, LockHalted, LockHolding, LockReleased:
	default:
		return fmt.Errorf("phase %q is none of %s, %s, %s, %s, %s, %s, %s, %s", l.Phase,
			LockProgressing, LockPaused, LockHolding, LockHalted, LockRollingBack, LockSucceeded, LockRolledBack, LockReleased)
	}
	if l.Holder == "" {
		return errors.New("holder is empty")
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"acceptedPods", l.AcceptedPods}, {"heldAt", l.HeldAt}, {"touchedMore", l.TouchedMore}} {
		if f.n < 0 {
			return fmt.Errorf("%s is %d, below 0", f.name, f.n)
		}
	}
	for _, f := range []struct {
		name   string
		images map[string]string
	}{{"images", l.Images}, {"previousImages", l.PreviousImages}} {
		for _, c := range slices.Sorted(maps.Keys(f.images)) {
			if err := checkLockImage(f.name, c, f.images[c]); err != nil {
				return err
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(l.BeforeImages)) {
		for _, img := range l.BeforeImages[c] {
			if err := checkLockImage("beforeImages", c, img); err != nil {
				return err
			}
		}
	}
	if len(l.PreviousStrategy) > 0 {
		var strategy map[string]json.RawMessage
		if err := json.Unmarshal(l.PreviousStrategy, &strategy); err != nil || strategy == nil {
			return fmt.Errorf("previousStrategy is %s, not an update strategy object", truncate(string(l.PreviousStrategy), 64))
		}
	}
	return nil
}

func checkLockImage(field, container, img string) error {
	if container == "" {
		return fmt.Errorf("%s has an empty container name", field)
	}
	if _, err := reference.ParseAnyReference(img); err != nil || strings.TrimSpace(img) != img {
		return fmt.Errorf("%s[%s] %q is not an image reference", field, container, truncate(img, 128))
	}
	return nil
}

// truncate keeps a hand-edited value short enough for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (l *Lock) encode() string {
	data, err := json.Marshal(l)
	if err != nil {
		panic(fmt.Sprintf("encoding rollout lock: %v", err))
	}
	return string(data)
}

// ReadLock reads the lock of the workload ref with one GET (of the workload, or of the
// ConfigMap that holds the lock of a pod selector) and nothing else: no pods, no writes. It is
// nil when there is none. A workload that does not exist is an *InvalidError.
func ReadLock(ctx context.Context, client kubernetes.Interface, ref Ref) (*Lock, error) {
	var (
		meta *metav1.ObjectMeta
		err  error
	)
	switch ref.Kind {
	case StatefulSet:
		var o *appsv1.StatefulSet
		if o, err = client.AppsV1().StatefulSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			meta = &o.ObjectMeta
		}
	case DaemonSet:
		var o *appsv1.DaemonSet
		if o, err = client.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			meta = &o.ObjectMeta
		}
	case Deployment:
		var o *appsv1.Deployment
		if o, err = client.AppsV1().Deployments(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			meta = &o.ObjectMeta
		}
	case Pods:
		var o *corev1.ConfigMap
		o, err = client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, lockConfigMapName(ref.Selector), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// No rollout of these pods ever started.
			return nil, nil
		}
		if err == nil {
			meta = &o.ObjectMeta
		}
	default:
		return nil, &InvalidError{Msg: fmt.Sprintf("unknown workload kind %q", ref.Kind)}
	}
	if apierrors.IsNotFound(err) {
		return nil, &InvalidError{Msg: fmt.Sprintf("%s not found", ref)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the lock of %s: %w", ref, err)
	}
	return parseLock(ref.Kind, meta.Namespace, meta.Name, meta.Annotations)
}
