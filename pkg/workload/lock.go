package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/distribution/reference"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// LockAnnotation holds a workload's Lock as JSON.
const LockAnnotation = "inplace-rollout.io/rollout"

// Lock is the annotation LockAnnotation as a workload reads it. The annotation holds the record
// of a rollout (pkg/rollout's Record), which the workload stores as it is given; of it the
// workload reads only what it set aside to hand itself back: the images and the resources its
// template had before the rollout, and its update strategy (see Observed.Previous).
type Lock struct {
	// Record is the annotation, as stored.
	Record string `json:"-"`
	// PreviousImages are the template images before the rollout, by container.
	PreviousImages map[string]string `json:"previousImages"`
	// PreviousResources are, of the template's resources before the rollout, the values the
	// rollout changes, by container; none for a rollout of images alone, and in locks written
	// before rollouts changed resources.
	PreviousResources map[string]inplace.Resources `json:"previousResources,omitempty"`
	// PreviousStrategy is the workload's update strategy before the rollout (StatefulSet and
	// DaemonSet: spec.updateStrategy; Deployment: {"paused": bool}).
	PreviousStrategy json.RawMessage `json:"previousStrategy,omitempty"`
}

// ParseLock reads raw, the lock annotation of ref, as a workload reads it when it loads: nil for
// none, a *LockError for an annotation no version writes.
func ParseLock(ref Ref, raw string) (*Lock, error) {
	e := LockErrorOf(ref, nil, false)
	return parseLock(e.Kind, e.Namespace, e.Name, map[string]string{LockAnnotation: raw})
}

func parseLock(kind Kind, ns, name string, annotations map[string]string) (*Lock, error) {
	raw, ok := annotations[LockAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	l := Lock{Record: raw}
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		return nil, &LockError{Kind: kind, Namespace: ns, Name: name, Err: err, JSON: true}
	}
	if err := l.check(); err != nil {
		return nil, &LockError{Kind: kind, Namespace: ns, Name: name, Err: err}
	}
	return &l, nil
}

// LockErrorOf is the *LockError for a fault err found in the lock of ref, naming the object that
// holds the annotation: the workload, or the ConfigMap holding the lock of label-selected pods.
func LockErrorOf(ref Ref, err error, notJSON bool) *LockError {
	_, name := LockObject(ref)
	return &LockError{Kind: ref.Kind, Namespace: ref.Namespace, Name: name, Err: err, JSON: notJSON}
}

// LockObject is the object, in ref's namespace, that holds the lock of ref: the workload itself,
// or for label-selected pods the ConfigMap named after their selector.
func LockObject(ref Ref) (kind, name string) {
	if ref.Kind == Pods {
		return "ConfigMap", PodLockName(ref.Selector)
	}
	return string(ref.Kind), ref.Name
}

// LockError is a lock annotation that cannot be read: not JSON, or JSON of a shape no version
// writes (someone edited it by hand). No retry fixes it, and acting on it could undo the wrong
// images, resources or strategy, so callers stop, write nothing and say which object.
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

// check refuses the parts of a decoded lock the workload reads when no version writes them: an
// image that is not a reference, resources no rollout sets, a recorded strategy that is not an
// object. Each error names the field. The rollout's record checks its own fields.
func (l *Lock) check() error {
	for _, c := range slices.Sorted(maps.Keys(l.PreviousImages)) {
		if err := CheckLockImage("previousImages", c, l.PreviousImages[c]); err != nil {
			return err
		}
	}
	if err := CheckLockResources("previousResources", l.PreviousResources); err != nil {
		return err
	}
	if len(l.PreviousStrategy) > 0 {
		var strategy map[string]json.RawMessage
		if err := json.Unmarshal(l.PreviousStrategy, &strategy); err != nil || strategy == nil {
			return fmt.Errorf("previousStrategy is %s, not an update strategy object", truncate(string(l.PreviousStrategy), 64))
		}
	}
	return nil
}

// CheckLockImage refuses img, recorded in a lock's field for container, when it is not an image
// reference as written (a person edited it).
func CheckLockImage(field, container, img string) error {
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
		o, err = client.CoreV1().ConfigMaps(ref.Namespace).Get(ctx, PodLockName(ref.Selector), metav1.GetOptions{})
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

// PreviousChange is what the lock records the template had before the rollout: its images and,
// of its resources, the values the rollout changes.
func (l *Lock) PreviousChange() Change {
	return Change{Images: l.PreviousImages, Resources: l.PreviousResources}
}
