package rollout

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestResolveBatches(t *testing.T) {
	tests := []struct {
		batches string
		total   int
		want    []int
		err     string
	}{
		{"1,50%,100%", 6, []int{1, 3, 6}, ""},
		{"1,50%,100%", 1, []int{1}, ""},  // batches that resolve to the same count are dropped
		{"10%,100%", 5, []int{1, 5}, ""}, // percentages round up
		{"25%,50%,75%,100%", 500, []int{125, 250, 375, 500}, ""},
		{"100%", 0, []int{0}, ""},
		{"3,100%", 2, []int{2}, ""}, // counts are capped at the total
		{"50%,10%,100%", 6, nil, "not strictly increasing at 10%"},
		{"2,1,100%", 6, nil, "not strictly increasing at 1"},
		{"1,2", 6, nil, "the last batch must be 100%"},
		{"0,100%", 6, nil, "a pod count must be positive"},
		{"150%,100%", 6, nil, "not a percentage between 0 and 100%"},
		{"x%,100%", 6, nil, "not a percentage"},
		{"5,10%,100%", 100, []int{5, 10, 100}, ""},
		{"5,10%,100%", 20, nil, "with 20 pods, batch 10% resolves to 2 pods, fewer than the 5 of the batch before it"},
		{"20,10%,100%", 1000, []int{20, 100, 1000}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.batches, func(t *testing.T) {
			b, err := ParseBatches(tt.batches)
			if err == nil {
				var got []int
				got, err = ResolveBatches(b, tt.total)
				if err == nil && tt.err == "" && !equalInts(got, tt.want) {
					t.Fatalf("ResolveBatches(%s, %d) = %v, want %v", tt.batches, tt.total, got, tt.want)
				}
			}
			if tt.err == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.err)
			}
		})
	}
}

func TestParseBatches(t *testing.T) {
	// 4294967297 and 2147483648 are beyond 32 bits: they once wrapped around to 1 and to a
	// negative count.
	for _, bad := range []string{"", "1,,100%", "one,100%", "4294967297,100%", "2147483648,100%"} {
		if _, err := ParseBatches(bad); err == nil {
			t.Errorf("ParseBatches(%q) succeeded", bad)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	good := func() Spec {
		return Spec{
			Target:         workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"},
			Images:         map[string]string{"app": "reg.example/app:v2"},
			Batches:        []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")},
			MaxUnavailable: intstr.FromInt32(1),
			Timeout:        10 * time.Minute,
		}
	}
	tests := []struct {
		name   string
		mutate func(*Spec)
		err    string
	}{
		{"valid", func(*Spec) {}, ""},
		{"no images", func(s *Spec) { s.Images = nil }, "nothing to change"},
		{"empty container name", func(s *Spec) { s.Images = map[string]string{"": "x:1"} }, "has no container name"},
		{"bad image", func(s *Spec) { s.Images = map[string]string{"app": "Reg/App:V2"} }, "not a valid image reference"},
		{"no name", func(s *Spec) { s.Target.Name = "" }, "needs a name"},
		{"pods without selector", func(s *Spec) { s.Target = workload.Ref{Kind: workload.Pods, Namespace: "ns"} }, "label selector"},
		{"negative soak", func(s *Spec) { s.Soak = -1 }, "cannot be negative"},
		{"bad max-unavailable", func(s *Spec) { s.MaxUnavailable = intstr.FromString("many") }, "max-unavailable"},
		{"zero max-unavailable", func(s *Spec) { s.MaxUnavailable = intstr.FromInt32(0) }, "max-unavailable 0 would let no pod be updated"},
		{"zero percent max-unavailable", func(s *Spec) { s.MaxUnavailable = intstr.FromString("0%") }, "max-unavailable 0% would let no pod be updated"},
		{"small percentage max-unavailable", func(s *Spec) { s.MaxUnavailable = intstr.FromString("1%") }, ""},
		{"zero timeout", func(s *Spec) { s.Timeout = 0 }, "timeout 0s would give no progress deadline"},
		{"bad on-inconclusive", func(s *Spec) { s.OnInconclusive = "shrug" }, "use fail, pause or continue"},
		{"bad prometheus URL", func(s *Spec) { s.PrometheusURL = "prometheus:9090" }, "not an http(s) URL"},
		{"prometheus URL with a password", func(s *Spec) { s.PrometheusURL = "http://u:s3cret@prom:9090" }, "basicAuth"},
		{"inline password from a driver", func(s *Spec) {
			s.Analysis = &analysis.Config{Prometheus: analysis.Prometheus{Address: "http://prom:9090", BasicAuth: &analysis.BasicAuth{Username: "u", Password: "s3cret"}}}
		}, "analysis.prometheus.basicAuth.password: a credential written in the spec can be read by everyone who can read the object that carries it; put it in a Secret in namespace ns and name its key in analysis.prometheus.basicAuth.passwordSecret"},
		{"inline password from the caller's own spec", func(s *Spec) {
			s.Analysis = &analysis.Config{Prometheus: analysis.Prometheus{Address: "http://prom:9090", BasicAuth: &analysis.BasicAuth{Username: "u", Password: "s3cret"}}}
			s.CallerCredentials = true
		}, ""},
		{"credential file from a driver", func(s *Spec) {
			s.Analysis = &analysis.Config{Prometheus: analysis.Prometheus{Address: "http://prom:9090", BearerTokenFile: "/etc/token"}}
		}, "analysis.prometheus.bearerTokenFile: a file would be read from the filesystem of the driver"},
		{"mixed batches are checked against the pod count later", func(s *Spec) {
			s.Batches = []intstr.IntOrString{intstr.FromInt32(50), intstr.FromString("10%"), intstr.FromString("100%")}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(&s)
			err := s.Validate()
			if tt.err == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestRollbackSpecValidate(t *testing.T) {
	good := func() RollbackSpec {
		return RollbackSpec{
			Target:         workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"},
			MaxUnavailable: intstr.FromInt32(1),
			Timeout:        10 * time.Minute,
		}
	}
	tests := []struct {
		name   string
		mutate func(*RollbackSpec)
		err    string
	}{
		{"valid: a rollback needs no images", func(*RollbackSpec) {}, ""},
		{"refuses zero max-unavailable", func(r *RollbackSpec) { r.MaxUnavailable = intstr.FromString("0%") }, "would let no pod be updated"},
		{"refuses zero timeout", func(r *RollbackSpec) { r.Timeout = 0 }, "no progress deadline"},
		{"checks max-unavailable", func(r *RollbackSpec) { r.MaxUnavailable = intstr.FromString("abc") }, "max-unavailable"},
		{"checks durations", func(r *RollbackSpec) { r.Timeout = -time.Second }, "cannot be negative"},
		{"checks the grace period", func(r *RollbackSpec) { r.GracePeriod = -time.Second }, "cannot be negative"},
		{"checks the target", func(r *RollbackSpec) { r.Target.Name = "Web" }, `target StatefulSet "Web" is not a valid name`},
		{"checks the namespace", func(r *RollbackSpec) { r.Target.Namespace = "" }, "no namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.mutate(&r)
			err := r.Validate()
			if tt.err == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.err)
			}
			var inv *InvalidError
			if err != nil && !errors.As(err, &inv) {
				t.Errorf("error %T, want *InvalidError", err)
			}
		})
	}
}

func TestSpecHash(t *testing.T) {
	base := Spec{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}, Images: map[string]string{"a": "x:1", "b": "y:1"}}
	same := base
	same.Batches = []intstr.IntOrString{intstr.FromString("100%")} // batches do not make another rollout
	other := base
	other.Images = map[string]string{"a": "x:2", "b": "y:1"}
	if base.Hash() != same.Hash() {
		t.Error("the hash depends on more than target and images")
	}
	if base.Hash() == other.Hash() {
		t.Error("different images give the same hash")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestValidateRefusesNamesTheAPICannotHold(t *testing.T) {
	for _, tt := range []struct {
		target workload.Ref
		want   string
	}{
		{workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web/extra"}, `target StatefulSet "web/extra" is not a valid name`},
		{workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "Web"}, `target StatefulSet "Web" is not a valid name`},
		{workload.Ref{Kind: workload.StatefulSet, Namespace: "a/b", Name: "web"}, `namespace "a/b" is not a valid name`},
		{workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web.v2"}, ""},
	} {
		err := Spec{Target: tt.target, Images: map[string]string{"app": "reg/app:v2"}, MaxUnavailable: intstr.FromInt32(1), Timeout: time.Minute}.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: error %v, want %q", tt.target, err, tt.want)
		}
	}
}

// TestSpecRollback: a spec's rollback goes at the rollout's own pace, by its holder, and leaves
// a template someone else changed as it is.
func TestSpecRollback(t *testing.T) {
	spec := Spec{Target: workload.Ref{Kind: workload.StatefulSet, Namespace: testNS, Name: testName}, Holder: "argo:shop/web", HolderUID: "u1",
		MaxUnavailable: intstr.FromString("25%"), GracePeriod: 5 * time.Second, Timeout: 3 * time.Minute, TakeOver: true,
		Images: map[string]string{"app": imageV2}, Soak: time.Minute}
	want := RollbackSpec{Target: spec.Target, Holder: "argo:shop/web", HolderUID: "u1", MaxUnavailable: intstr.FromString("25%"),
		GracePeriod: 5 * time.Second, Timeout: 3 * time.Minute}
	if got := spec.Rollback(); !reflect.DeepEqual(got, want) {
		t.Errorf("Rollback() = %+v, want %+v", got, want)
	}
}
