package tekton_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestOrphanedRolloutRollsBack: a CustomRun gone mid-rollout without the rollback its finalizer
// holds it for (the finalizer removed by hand once it was deleted, or the run deleted and its
// finalizer stripped while our controller was down) leaves its StatefulSet held for nobody. Our
// controller's scan finds the lock and rolls it back: every pod is the pod it was, on the image
// it ran, and the StatefulSet has its update strategy back. Not parallel: one case stops our
// controller.
func TestOrphanedRolloutRollsBack(t *testing.T) {
	tests := []struct {
		name string
		// down: our controller is stopped (SIGKILL, its Lease not given up) while the run goes.
		down bool
	}{
		{name: "finalizer removed once the run is deleted"},
		{name: "run deleted while the controller is down", down: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t)
			clitest.CreateStatefulSet(t, env, ns, "web", 3)
			before := recordPods(t, ns, "web")
			strategy := statefulSetOf(t, ns).Spec.UpdateStrategy
			// A long soak after the first batch: the run goes while one pod runs the new image.
			createRun(t, ns, "orphan", `{target: {kind: StatefulSet, name: web}, batches: [1, "100%"], gracePeriod: 1s, soak: 10m, timeout: 2m}`,
				`[{name: images, value: ["app=`+clitest.AppV2+`"]}]`)
			run := waitRun(t, ns, "orphan", "one pod updated", func(r *v1beta1.CustomRun) bool {
				updated, _ := progress(t, &r.Status)["updated"].(float64)
				return updated >= 1
			})
			if lock := lockOf(t, ns); lock.Holder != "tekton:"+ns+"/orphan" || lock.HolderUID != run.UID || !lock.Active() {
				t.Fatalf("lock %+v; want it held by tekton:%s/orphan, of UID %s", lock, ns, run.UID)
			}
			if tt.down {
				restarted := false
				t.Cleanup(func() {
					if !restarted {
						_ = controller.Restart()
					}
				})
				if err := controller.Kill(); err != nil {
					t.Fatal(err)
				}
				dropFinalizers(t, ns, "orphan")
				deleteRun(t, ns, "orphan")
				restarted = true
				if err := controller.Restart(); err != nil {
					t.Fatalf("starting the controller again: %v", err)
				}
			} else {
				// Deleted first: a run that is not being deleted gets its finalizer back.
				deleteRun(t, ns, "orphan")
				dropFinalizers(t, ns, "orphan")
			}
			cluster.WaitFor(t, rolloutTimeout, "CustomRun "+ns+"/orphan gone", func(ctx context.Context) (bool, error) {
				_, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Get(ctx, "orphan", metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, nil
				}
				return false, err
			})
			cluster.WaitFor(t, rolloutTimeout, "the rollout of the deleted run rolled back", func(context.Context) (bool, error) {
				lock := lockOf(t, ns)
				if lock.Phase != rollout.PhaseRolledBack {
					return false, fmt.Errorf("lock of rollout %s %s, held by %s", lock.RolloutID, lock.Phase, lock.Holder)
				}
				return true, nil
			})
			checkBackOnV1(t, ns, before)
			if got := statefulSetOf(t, ns).Spec.UpdateStrategy; !equality.Semantic.DeepEqual(got, strategy) {
				t.Errorf("StatefulSet %s/web update strategy %+v after the rollback, want %+v back", ns, got, strategy)
			}
			lines := clitest.LogLines(t, controller.LogPath, `msg="rolling back the rollout of a deleted CustomRun"`, " namespace="+ns+" ")
			if len(lines) != 1 || !strings.Contains(lines[0], " holder=tekton:"+ns+"/orphan ") || !strings.Contains(lines[0], " workload=StatefulSet/web ") ||
				!strings.Contains(lines[0], " rolloutID=") || !strings.Contains(lines[0], "level=WARN") {
				t.Errorf("the controller's log: lines %q; want one warning naming holder tekton:%s/orphan, workload=StatefulSet/web and its rolloutID", lines, ns)
			}
		})
	}
}

// statefulSetOf is StatefulSet ns/web as it is now.
func statefulSetOf(t *testing.T, ns string) *appsv1.StatefulSet {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// lockOf is the rollout lock of StatefulSet ns/web.
func lockOf(t *testing.T, ns string) *rollout.Record {
	t.Helper()
	var lock rollout.Record
	raw := statefulSetOf(t, ns).Annotations[workload.LockAnnotation]
	if err := json.Unmarshal([]byte(raw), &lock); err != nil {
		t.Fatalf("StatefulSet %s/web lock %q: %v", ns, raw, err)
	}
	return &lock
}

// dropFinalizers removes every finalizer of CustomRun ns/name, as a person would by hand.
func dropFinalizers(t *testing.T, ns, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("removing the finalizers of CustomRun %s/%s: %v", ns, name, err)
	}
}

// deleteRun deletes CustomRun ns/name: it goes once no finalizer holds it.
func deleteRun(t *testing.T, ns, name string) {
	t.Helper()
	if err := tektonClient(t).TektonV1beta1().CustomRuns(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting CustomRun %s/%s: %v", ns, name, err)
	}
}
