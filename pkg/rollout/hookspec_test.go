package rollout

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestDescribeHooks: each hook is one line, saying what it calls or waits for, and the timeout
// and failure policy it runs with, the engine's defaults where the spec gives none.
func TestDescribeHooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks *inplace.Hooks
		want  []string
	}{
		{"none", nil, nil},
		{"an HTTP call with its defaults", &inplace.Hooks{PreUpdate: &inplace.Hook{HTTP: &inplace.HTTPHook{Port: intstr.FromString("http"), Path: "/hook/pre"}}},
			[]string{"preUpdate: GET :http/hook/pre (timeout 10s, onFailure Fail)"}},
		{"an HTTP call as given", &inplace.Hooks{PostUpdate: &inplace.Hook{
			HTTP:    &inplace.HTTPHook{Port: intstr.FromInt32(8080), Path: "/hook/post", Method: "POST", ExpectStatus: 204},
			Timeout: 3 * time.Second, OnFailure: inplace.HookContinue}},
			[]string{"postUpdate: POST :8080/hook/post, expecting 204 (timeout 3s, onFailure Continue)"}},
		{"handshakes, preUpdate first", &inplace.Hooks{
			PostUpdate: &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/registered"}, Timeout: time.Minute},
			PreUpdate:  &inplace.Hook{Handshake: &inplace.HandshakeHook{Condition: "example.com/deregistered"}}},
			[]string{"preUpdate: handshake on condition example.com/deregistered (timeout 5m0s, onFailure Fail)",
				"postUpdate: handshake on condition example.com/registered (timeout 1m0s, onFailure Fail)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeHooks(tt.hooks); !slices.Equal(got, tt.want) {
				t.Errorf("DescribeHooks = %q, want %q", got, tt.want)
			}
		})
	}
}
