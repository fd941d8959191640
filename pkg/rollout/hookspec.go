package rollout

import (
	"fmt"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// DescribeHooks says each hook configured, one line each, with the timeout and failure policy
// it runs with, defaults included: "preUpdate: POST :8080/hook/pre (timeout 10s, onFailure
// Fail)". None configured is no line.
func DescribeHooks(h *inplace.Hooks) []string {
	if h == nil {
		return nil
	}
	var out []string
	for _, n := range []struct {
		name inplace.HookName
		hook *inplace.Hook
	}{{inplace.PreUpdate, h.PreUpdate}, {inplace.PostUpdate, h.PostUpdate}} {
		if n.hook != nil {
			out = append(out, fmt.Sprintf("%s: %s", n.name, describeHook(n.hook)))
		}
	}
	return out
}

// describeHook says what one hook does and with which timeout and failure policy.
func describeHook(h *inplace.Hook) string {
	timeout, onFailure := h.Timeout, h.OnFailure
	if onFailure == "" {
		onFailure = inplace.HookFail
	}
	var what string
	switch {
	case h.HTTP != nil:
		method := h.HTTP.Method
		if method == "" {
			method = "GET"
		}
		what = fmt.Sprintf("%s :%s%s", method, h.HTTP.Port.String(), h.HTTP.Path)
		if h.HTTP.ExpectStatus != 0 {
			what += fmt.Sprintf(", expecting %d", h.HTTP.ExpectStatus)
		}
		if timeout <= 0 {
			timeout = inplace.DefaultHTTPHookTimeout
		}
	case h.Handshake != nil:
		what = fmt.Sprintf("handshake on condition %s", h.Handshake.Condition)
		if timeout <= 0 {
			timeout = inplace.DefaultHandshakeHookTimeout
		}
	}
	return fmt.Sprintf("%s (timeout %s, onFailure %s)", what, timeout, onFailure)
}
