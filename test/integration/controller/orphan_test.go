package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestOrphanedRolloutRollsBack: an InPlaceRollout gone mid-rollout without the rollback its
// finalizer holds it for (deleted, and its finalizer removed by hand, while the controller was
// down) leaves its StatefulSet held for nobody. The controller's scan finds the lock and rolls it back: every pod
// is the pod it was, on the image it ran, and the template is the old one again.
func TestOrphanedRolloutRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")
	// A long soak after the first batch: the object goes while one pod runs the new image.
	applyRollout(t, ns, "orphan", statefulSetSpec(clitest.AppV2, `[1, "100%"]`, "soak: 10m"))
	_, obj := waitRollout(t, ns, "orphan", "the first batch updated, soaking", func(o *v1alpha1.InPlaceRollout) bool { return current(o) && o.Status.Updated == 1 })
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"}
	lock, err := rollout.ReadRecord(t.Context(), env.Client, ref)
	if err != nil || lock.Holder != "inplacerollout:"+ns+"/orphan" || lock.HolderUID != obj.UID || !lock.Active() {
		t.Fatalf("lock %+v (%v); want it held by inplacerollout:%s/orphan, of UID %s", lock, err, ns, obj.UID)
	}

	// The controller is down meanwhile (SIGKILL, its Lease not given up), so that its
	// finalizer's rollback does not begin before the finalizer is gone. Deleted first: an object
	// that is not being deleted gets its finalizer back.
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = controller.Restart()
		}
	})
	if err := controller.Kill(); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "delete", "inplacerollout/orphan", "-n", ns, "--wait=false")
	mustKubectl(t, "", "patch", "inplacerollout/orphan", "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	waitGone(t, ns, "orphan")
	restarted = true
	if err := controller.Restart(); err != nil {
		t.Fatalf("starting the controller again: %v", err)
	}
	cluster.WaitFor(t, rolloutTimeout, "the rollout of the deleted object rolled back", func(ctx context.Context) (bool, error) {
		lock, err := rollout.ReadRecord(ctx, env.Client, ref)
		if err != nil {
			return false, err
		}
		if lock.Phase != rollout.PhaseRolledBack {
			return false, fmt.Errorf("lock of rollout %s %s, held by %s", lock.RolloutID, lock.Phase, lock.Holder)
		}
		return true, nil
	})
	checkSamePods(t, ns, "web", before, true)
	checkTemplate(t, ns, "web", clitest.AppV1)
	lines := clitest.LogLines(t, controller.LogPath, `msg="rolling back the rollout of a deleted InPlaceRollout"`, " namespace="+ns+" ")
	if len(lines) != 1 || !strings.Contains(lines[0], " holder=inplacerollout:"+ns+"/orphan ") || !strings.Contains(lines[0], " workload=StatefulSet/web ") ||
		!strings.Contains(lines[0], " rolloutID=") || !strings.Contains(lines[0], "level=WARN") {
		t.Errorf("the controller's log: lines %q; want one warning naming holder inplacerollout:%s/orphan, workload=StatefulSet/web and its rolloutID", lines, ns)
	}
}
