package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults of the fields a spec may leave out.
const (
	DefaultTimeout        = 10 * time.Minute
	DefaultOnInconclusive = "pause"
	DefaultPinDigests     = "auto"
)

// SetDefaults fills in the fields the spec leaves out: one batch of 100%, one pod at a time, no
// grace period or soak, a 10m progress deadline, a pause on an inconclusive analysis, and digests pinned when the
// registry answers.
func SetDefaults(s *InPlaceRolloutSpec) {
	if len(s.Batches) == 0 {
		s.Batches = []intstr.IntOrString{intstr.FromString("100%")}
	}
	if s.MaxUnavailable == nil {
		one := intstr.FromInt32(1)
		s.MaxUnavailable = &one
	}
	for _, d := range []**metav1.Duration{&s.GracePeriod, &s.Soak} {
		if *d == nil {
			*d = &metav1.Duration{}
		}
	}
	if s.Timeout == nil {
		s.Timeout = &metav1.Duration{Duration: DefaultTimeout}
	}
	if s.OnInconclusive == "" {
		s.OnInconclusive = DefaultOnInconclusive
	}
	if s.PinDigests == "" {
		s.PinDigests = DefaultPinDigests
	}
}
