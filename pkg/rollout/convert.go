package rollout

import (
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// FromV1alpha1 converts a rollout spec document to the engine's Spec, defaulted, for the
// workload in namespace run by holder, and validates it as Reconcile would. The caller's spec
// is left as it was.
func FromV1alpha1(in *v1alpha1.InPlaceRolloutSpec, namespace, holder string) (Spec, error) {
	s := *in
	v1alpha1.SetDefaults(&s)
	kind, err := workload.ParseKind(s.Target.Kind)
	if err != nil {
		return Spec{}, invalid("spec.target.kind: %v", err)
	}
	spec := Spec{
		Target:         workload.Ref{Kind: kind, Namespace: namespace, Name: s.Target.Name, Selector: s.Target.Selector},
		Images:         s.Images,
		IncludeInit:    s.IncludeInit,
		Batches:        s.Batches,
		MaxUnavailable: *s.MaxUnavailable,
		GracePeriod:    s.GracePeriod.Duration,
		Soak:           s.Soak.Duration,
		Timeout:        s.Timeout.Duration,
		AllowUnready:   s.AllowUnready,
		Holder:         holder,
		Analysis:       s.Analysis,
		OnInconclusive: s.OnInconclusive,
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
