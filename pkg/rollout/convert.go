package rollout

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Caller is what the driver running a spec sets, since a spec document does not say it.
type Caller struct {
	// Namespace of the workload: the CLI's, the Argo Rollout's, the CustomRun's.
	Namespace string
	// Holder names the driver on the lock: cli, argo:NS/NAME, tekton:NS/NAME.
	Holder string
	// HolderUID is the UID of the object Holder names (the Rollout, the CustomRun).
	HolderUID types.UID
	// CallerCredentials: the spec is the caller's own (the CLI's command line or file), so the
	// analysis may read credential files and take credentials inline (see
	// Spec.CallerCredentials).
	CallerCredentials bool
}

// FromV1alpha1 converts a rollout spec document to the engine's Spec, defaulted, for the
// caller, and validates it as Reconcile would. The document is left as it was.
func FromV1alpha1(in *v1alpha1.InPlaceRolloutSpec, c Caller) (Spec, error) {
	namespace, holder := c.Namespace, c.Holder
	s := *in
	v1alpha1.SetDefaults(&s)
	kind, err := workload.ParseKind(s.Target.Kind)
	if err != nil {
		return Spec{}, invalid("spec.target.kind: %v", err)
	}
	hooks, err := HooksFromV1alpha1("spec.hooks", s.Hooks)
	if err != nil {
		return Spec{}, err
	}
	spec := Spec{
		Target:            workload.Ref{Kind: kind, Namespace: namespace, Name: s.Target.Name, Selector: s.Target.Selector},
		Images:            s.Images,
		Resources:         s.Resources,
		Hooks:             hooks,
		IncludeInit:       s.IncludeInit,
		Batches:           s.Batches,
		UpTo:              s.UpTo,
		MaxUnavailable:    *s.MaxUnavailable,
		GracePeriod:       s.GracePeriod.Duration,
		Soak:              s.Soak.Duration,
		Timeout:           s.Timeout.Duration,
		AllowUnready:      s.AllowUnready,
		Holder:            holder,
		HolderUID:         c.HolderUID,
		Analysis:          s.Analysis,
		CallerCredentials: c.CallerCredentials,
		OnInconclusive:    s.OnInconclusive,
		PinDigests:        s.PinDigests,
		PrePull:           s.PrePull,
	}
	switch {
	case kind == workload.Pods && s.Target.Name != "":
		return Spec{}, invalid("spec.target: kind Pods takes a selector, not a name (%q)", s.Target.Name)
	case kind != workload.Pods && s.Target.Selector != "":
		return Spec{}, invalid("spec.target: kind %s takes a name, not a selector (%q)", kind, s.Target.Selector)
	}
	if err := spec.Validate(); err != nil {
		return Spec{}, invalid("spec: %v", err)
	}
	return spec, nil
}

// HooksFromV1alpha1 converts the hooks of a spec document, and checks them as Validate does,
// each error naming the field under prefix: spec.hooks for a document, the flag for a command
// line that gives the field alone. No hook, or an empty hooks field, is nil.
func HooksFromV1alpha1(prefix string, in *v1alpha1.Hooks) (*inplace.Hooks, error) {
	if in == nil || in.PreUpdate == nil && in.PostUpdate == nil {
		return nil, nil
	}
	out := &inplace.Hooks{PreUpdate: hookFromV1alpha1(in.PreUpdate), PostUpdate: hookFromV1alpha1(in.PostUpdate)}
	if err := inplace.CheckHooks(prefix, out); err != nil {
		return nil, invalid("%v", err)
	}
	return out, nil
}

func hookFromV1alpha1(in *v1alpha1.Hook) *inplace.Hook {
	if in == nil {
		return nil
	}
	out := &inplace.Hook{OnFailure: inplace.HookFailurePolicy(in.OnFailure)}
	if in.Timeout != nil {
		out.Timeout = in.Timeout.Duration
	}
	if h := in.HTTP; h != nil {
		out.HTTP = &inplace.HTTPHook{Port: h.Port, Path: h.Path, Method: h.Method, ExpectStatus: int(h.ExpectStatus)}
	}
	if h := in.Handshake; h != nil {
		out.Handshake = &inplace.HandshakeHook{Condition: corev1.PodConditionType(h.Condition)}
	}
	return out
}
