package badinput

import (
	"errors"
	"fmt"
	"testing"
)

// TestInvalidError: the message ends with the choice its Fix names, in words no driver owns,
// and the error is found through wrapping.
func TestInvalidError(t *testing.T) {
	tests := []struct {
		fix  Fix
		want string
	}{
		{"", "bad"},
		{FixAllowUnready, "bad, or allow the rollout to start with pods that are not Ready"},
		{FixSupersede, "bad; supersede it with this rollout, or roll it back first"},
		{FixAllowOwned, "bad, or allow pods a controller owns to be updated anyway"},
		{FixPrometheusAddress, "bad: give prometheus.address in the analysis config"},
		{FixStateAnnotation, "bad; restore it or remove it, then run again. Nothing was changed"},
		{FixPinNever, "bad, or turn digest pinning off (never) to take the pods on the tag as done, whatever content it names"},
		{FixTakeOver, "bad; if that holder no longer exists, take the rollout over to roll it back or replace it"},
		{"Unknown", "bad"},
	}
	for _, tt := range tests {
		t.Run(string(tt.fix), func(t *testing.T) {
			err := fmt.Errorf("starting: %w", &InvalidError{Msg: "bad", Fix: tt.fix})
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Error() != tt.want || inv.Fix != tt.fix {
				t.Errorf("error %v: found %v, want %q", err, inv, tt.want)
			}
		})
	}
}
