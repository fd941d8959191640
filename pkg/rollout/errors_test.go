package rollout

import (
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	wrap := func(err error) error { return fmt.Errorf("writing StatefulSet ns/web: %w", err) }
	tests := []struct {
		name string
		err  error
		st   Status
		want string // the type classify gives: permanent, rollingBack, blocked, retry
	}{
		{"invalid (422)", wrap(apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "web", nil)), Status{}, "permanent"},
		{"forbidden", wrap(apierrors.NewForbidden(gr, "web", errors.New("no"))), Status{}, "permanent"},
		{"bad request", wrap(apierrors.NewBadRequest("no")), Status{}, "permanent"},
		{"not found", wrap(apierrors.NewNotFound(gr, "web")), Status{}, "permanent"},
		{"forbidden while rolling back", wrap(apierrors.NewForbidden(gr, "web", errors.New("no"))), Status{Phase: PhaseRollingBack}, "rollingBack"},
		{"conflict", wrap(apierrors.NewConflict(gr, "web", errors.New("changed"))), Status{}, "retry"},
		{"server timeout", wrap(apierrors.NewServerTimeout(gr, "patch", 1)), Status{}, "retry"},
		{"too many requests", wrap(apierrors.NewTooManyRequests("slow down", 1)), Status{}, "retry"},
		{"internal error", wrap(apierrors.NewInternalError(errors.New("etcd"))), Status{}, "retry"},
		{"service unavailable", wrap(apierrors.NewServiceUnavailable("starting")), Status{}, "retry"},
		{"connection refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), Status{}, "retry"},
		{"unreadable lock", fmt.Errorf("reading StatefulSet ns/web: %w", &workload.LockError{Kind: workload.StatefulSet, Namespace: "ns", Name: "web", Err: errors.New("bad"), JSON: true}), Status{}, "blocked"},
		{"unreadable state", fmt.Errorf("pod ns/web-0: %w", &inplace.StateError{Namespace: "ns", Pod: "web-0", Err: errors.New("bad")}), Status{}, "blocked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(tt.err, tt.st)
			var (
				pe *PermanentError
				be *BlockedError
			)
			got := "retry"
			switch {
			case errors.As(err, &pe) && pe.RollingBack:
				got = "rollingBack"
			case errors.As(err, &pe):
				got = "permanent"
			case errors.As(err, &be):
				got = "blocked"
			}
			if got != tt.want {
				t.Errorf("classify(%v) is %s (%T), want %s", tt.err, got, err, tt.want)
			}
		})
	}
}
