package rollout_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// onImage counts the pods whose app container's spec has image.
func onImage(t *testing.T, ns, image string) int {
	t.Helper()
	n := 0
	for _, p := range listPods(t, ns, "app=web") {
		if p.Spec.Containers[0].Image == image {
			n++
		}
	}
	return n
}

// TestRunUpToHoldsThenFinishes is a manual canary: run --up-to 50% updates half the pods and
// exits 0 with the rollout Holding and the StatefulSet still held; a second run without it
// finishes, and no pod is updated twice.
func TestRunUpToHoldsThenFinishes(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 4)
	before := identities(t, ns, "app=web")
	args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + appV2, "--batches", "1,100%"}
	r := runCLI(t, append(args, "--up-to", "50%")...)
	if r.Code != 0 || !contains(r.Stdout, "Holding") {
		t.Fatalf("run --up-to 50%%: %s; want exit 0 and phase Holding", r)
	}
	if n := onImage(t, ns, appV2); n != 2 {
		t.Errorf("%d pods on the new image after --up-to 50%%, want 2", n)
	}
	if st := runCLI(t, "status", "-n", ns, "--target", "statefulset/web"); st.Code != 0 || !contains(st.Stdout, ": Holding") {
		t.Errorf("status: %s; want the rollout Holding", st)
	}
	held := waitStatefulSet(t, ns, "web", "held", func(*appsv1.StatefulSet) bool { return true })
	if equality.Semantic.DeepEqual(held.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("update strategy %+v is the original one: the StatefulSet is not held while the rollout holds", held.Spec.UpdateStrategy)
	}

	if r := runCLI(t, args...); r.Code != 0 || !contains(r.Stdout, "Succeeded") {
		t.Fatalf("second run: %s; want exit 0, Succeeded", r)
	}
	podsOnImage(t, ns, "app=web", appV2)
	// Every pod restarted its app container once: the two held pods were not updated again.
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
}

// TestRollbackFromHold: a rollout holding at its hold point rolls back like one in flight.
func TestRollbackFromHold(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--up-to", "1")
	if r.Code != 0 || !contains(r.Stdout, "Holding") {
		t.Fatalf("run --up-to 1: %s; want exit 0 and phase Holding", r)
	}
	if r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web"); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "app=web")
	rolledBack := 0
	for _, p := range listPods(t, ns, "app=web") {
		if after[p.Name].uid != before[p.Name].uid || after[p.Name].imageIDs["app"] != before[p.Name].imageIDs["app"] {
			t.Errorf("pod %s: UID %s, imageID %s; want %s on %s", p.Name, after[p.Name].uid, after[p.Name].imageIDs["app"], before[p.Name].uid, before[p.Name].imageIDs["app"])
		}
		if st := stateOf(t, &p); st != nil && st.Stage == inplace.StageRolledBack {
			rolledBack++
		}
	}
	if rolledBack != 1 {
		t.Errorf("%d pods rolled back, want the 1 the hold updated", rolledBack)
	}
	waitStatefulSet(t, ns, "web", "template and strategy restored", func(s *appsv1.StatefulSet) bool {
		return equality.Semantic.DeepEqual(s.Spec.Template, orig.Spec.Template) && equality.Semantic.DeepEqual(s.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
	})
}
