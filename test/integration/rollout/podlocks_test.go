package rollout_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podLockConfigMaps lists the names of the pod-selector lock ConfigMaps in the namespace.
func podLockConfigMaps(t *testing.T, ns string) []string {
	t.Helper()
	list, err := env.Client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "inplace-rollout-pods-") {
			names = append(names, cm.Name+" "+cm.Annotations["inplace-rollout.io/selector"])
		}
	}
	slices.Sort(names)
	return names
}

// TestPodLocksDoNotPileUp rolls the same pods out under three selectors: a lock ConfigMap
// whose rollout was rolled back, or whose pods were all taken by a later rollout, is removed;
// the last record of each pod stays for `rollback`.
func TestPodLocksDoNotPileUp(t *testing.T) {
	ns := env.Namespace(t)
	for _, name := range []string{"a", "b"} {
		createPodOn(t, ns, name, "gc", appV1)
	}
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "a", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"tier":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func(selector, image string, want int) {
		t.Helper()
		if r := runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", selector, "--image", "app="+image); r.Code != want {
			t.Fatalf("run -l %s to %s: %s\nwant exit %d", selector, image, r, want)
		}
	}
	has := func(when string, selectors ...string) {
		t.Helper()
		got := podLockConfigMaps(t, ns)
		if len(got) != len(selectors) {
			t.Fatalf("%s: lock ConfigMaps %q, want those of %q", when, got, selectors)
		}
		for _, s := range selectors {
			if !slices.ContainsFunc(got, func(g string) bool { return strings.HasSuffix(g, " "+s) }) {
				t.Fatalf("%s: lock ConfigMaps %q, want those of %q", when, got, selectors)
			}
		}
	}

	run("app=gc", appV2, 0)
	has("after the first rollout", "app=gc")
	// Pod a only: the lock of app=gc still records pod b, so it stays.
	run("tier=x", appV3, 0)
	has("after a rollout of one of its pods", "app=gc", "tier=x")
	// A rollout that crashes and is rolled back leaves nothing to record once another starts.
	run("app=gc,tier=x", "registry.example/app:crash", 1)
	run("app=gc", appV1, 0)
	// Both pods are now this last rollout's: the other locks record nothing any more.
	has("after a rollout of every pod", "app=gc")
	if r := runCLI(t, "rollback", "-n", ns, "--target", "pods", "--selector", "app=gc"); r.Code != 0 {
		t.Fatalf("rollback of the lock that stayed: %s", r)
	}
}
