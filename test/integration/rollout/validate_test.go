package rollout_test

import "testing"

// TestZeroMaxUnavailableAndTimeoutAreRefused: --max-unavailable 0 (or 0%) would update no pod,
// and --timeout 0 no deadline at all; neither silently becomes something else. Bad input,
// exit 2, nothing written.
func TestZeroMaxUnavailableAndTimeoutAreRefused(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-unavailable", "0"}, "max-unavailable 0 would let no pod be updated"},
		{[]string{"--max-unavailable", "0%"}, "max-unavailable 0% would let no pod be updated"},
		{[]string{"--timeout", "0"}, "timeout 0s would give no progress deadline"},
		{[]string{"--timeout", "0s"}, "timeout 0s would give no progress deadline"},
	} {
		for _, verb := range []string{"run", "rollback"} {
			t.Run(verb+" "+tt.args[0]+" "+tt.args[1], func(t *testing.T) {
				before := resourceVersions(t, ns)
				args := append([]string{verb, "-n", ns, "--target", "statefulset/web"}, tt.args...)
				if verb == "run" {
					args = append(args, "--image", "app="+appV2)
				}
				r := runCLI(t, args...)
				if r.Code != 2 || !contains(r.Stderr, tt.want) {
					t.Fatalf("%s\nwant exit 2 and %q", r, tt.want)
				}
				if after := resourceVersions(t, ns); !equalMaps(before, after) {
					t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
	}
}
