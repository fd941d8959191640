package rollout

import (
	"context"

	"errors"
	"k8s.io/apimachinery/pkg/types"
	"strings"
	"testing"
)

// TestTakeOver: a rollout left by a holder that no longer exists refuses every other caller,
// saying it can be taken over; taken over explicitly, the lock changes holder in one write and
// nothing else, and the new holder rolls it back. A Rollout created again under the name of the
// deleted one is another holder.
func TestTakeOver(t *testing.T) {
	for _, tc := range []struct {
		name, holder, uid string
	}{
		{"another holder", "cli", ""},
		{"the same name, another object", "argo:shop/web", "uid-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3})
			e := fc.engine()
			gone := fc.spec(imageV2, one, all)
			gone.Holder, gone.HolderUID = "argo:shop/web", "uid-1"
			// Stopped once the first batch's pod is stepped: the one pod the rollout touched.
			fc.mustDrive(e, gone, Status{}, func(st Status) bool { return st.Batch == 1 && st.Updating == 1 })
			if l := fc.lock(); l.HolderUID != "uid-1" {
				t.Fatalf("lock holder UID = %q, want uid-1", l.HolderUID)
			}

			next := fc.spec(imageV3, one, all)
			next.Holder, next.HolderUID, next.Supersede = tc.holder, types.UID(tc.uid), true
			rb := RollbackSpec{Target: next.Target, Holder: tc.holder, HolderUID: types.UID(tc.uid), MaxUnavailable: next.MaxUnavailable, Timeout: next.Timeout}
			before := fc.snapshot()
			var inv *InvalidError
			if _, _, err := e.Reconcile(context.Background(), next, Status{}); !errors.As(err, &inv) || inv.Fix != FixTakeOver || !strings.Contains(err.Error(), "argo:shop/web") {
				t.Errorf("run by %s = %v; want an InvalidError naming argo:shop/web with the take-over choice", tc.holder, err)
			}
			if _, _, err := e.Abort(context.Background(), rb, Status{}); !errors.As(err, &inv) || inv.Fix != FixTakeOver {
				t.Errorf("rollback by %s = %v; want an InvalidError with the take-over choice", tc.holder, err)
			}
			if fc.snapshot() != before {
				t.Fatal("a refused caller wrote to the cluster")
			}

			rb.TakeOver = true
			st, _, err := e.Abort(context.Background(), rb, Status{})
			if err != nil || st.RolloutID == "" {
				t.Fatalf("take-over = %+v, %v", st, err)
			}
			l := fc.lock()
			if l.Holder != tc.holder || l.HolderUID != types.UID(tc.uid) || l.Phase != PhaseProgressing || l.Images[testApp] != imageV2 {
				t.Errorf("lock after take-over = %+v; want holder %s (UID %q), the rollout as it was", l, tc.holder, tc.uid)
			}
			rb.TakeOver = false
			done := driveAbort(fc, e, rb, Status{})
			if done.Phase != PhaseRolledBack || done.RolledBack != 1 {
				t.Errorf("rollback by the new holder = %+v; want RolledBack, 1 pod", done)
			}
		})
	}
}
