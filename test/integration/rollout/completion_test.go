package rollout_test

import (
	"slices"
	"strings"
	"testing"
)

// TestShellCompletion: the shell completes, from the cluster, a namespace, the target's kind
// and then its name, and the target's containers for --image (cobra's __complete, which the
// completion scripts of `inplace-rollout completion bash|zsh|fish` call).
func TestShellCompletion(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 1)
	for _, tc := range []struct {
		name string
		args []string
		want []string
		not  []string
	}{
		{"kinds", []string{"run", "--target", "st"}, []string{"statefulset/"}, []string{"daemonset/"}},
		{"names of the kind", []string{"run", "-n", ns, "--target", "statefulset/"}, []string{"statefulset/web"}, nil},
		{"names with a prefix", []string{"status", "-n", ns, "--target", "statefulset/x"}, nil, []string{"statefulset/web"}},
		{"containers of the target", []string{"run", "-n", ns, "--target", "statefulset/web", "--image", ""}, []string{"app=", "sidecar="}, nil},
		{"namespaces", []string{"rollback", "--namespace", ns[:len(ns)-2]}, []string{ns}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"__complete"}, tc.args...)...)
			if r.Code != 0 {
				t.Fatalf("%s", r)
			}
			lines := strings.Split(r.Stdout, "\n")
			for _, w := range tc.want {
				if !slices.Contains(lines, w) {
					t.Errorf("completion of %v offers %q, want %q among them", tc.args, lines, w)
				}
			}
			for _, n := range tc.not {
				if slices.Contains(lines, n) {
					t.Errorf("completion of %v offers %q, which does not match", tc.args, n)
				}
			}
		})
	}
}
