package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// setState overwrites a pod's state annotation with raw, as a person editing it would.
func setState(t *testing.T, ns, pod, raw string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + inplace.StateAnnotation + `":` + jsonString(raw) + `}}}`
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stsLock returns the StatefulSet's lock annotation, "" when it has none.
func stsLock(t *testing.T, ns, name string) string {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts.Annotations[workload.LockAnnotation]
}

// TestCorruptStateRefusedBeforeAnyWrite: a pod whose state annotation is not JSON stops `run`
// before anything is written, naming the pod and the annotation.
func TestCorruptStateRefusedBeforeAnyWrite(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 3)
	setState(t, ns, "web-1", "{not json")
	before := resourceVersions(t, ns)
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2)
	if r.Code != 2 || !contains(r.Stderr, "web-1") || !contains(r.Stderr, inplace.StateAnnotation) {
		t.Fatalf("%s\nwant exit 2 naming web-1 and %s", r, inplace.StateAnnotation)
	}
	if after := resourceVersions(t, ns); !equalMaps(before, after) {
		t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
	}
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lock := sts.Annotations[workload.LockAnnotation]; lock != "" || sts.Spec.UpdateStrategy.Type != orig.Spec.UpdateStrategy.Type ||
		sts.Spec.Template.Spec.Containers[0].Image != appV1 {
		t.Errorf("lock %q, strategy %s, template %s; want no lock and the workload untouched", lock, sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.Containers[0].Image)
	}
}

// TestCorruptStateDuringRun: a pod's state edited to something unreadable mid-rollout stops the
// rollout with an error naming the pod and what to do, instead of retrying.
func TestCorruptStateDuringRun(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 4)
	touched := stopAfterFirstBatch(t, ns, appV2)
	if touched["web-0"] {
		t.Fatalf("web-0 was touched by the first batch (%v); the test needs it untouched", touched)
	}
	setState(t, ns, "web-0", "{not json")
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,50%,100%")
	if r.Code != 3 || !contains(r.Stderr, "/web-0: annotation "+inplace.StateAnnotation) || !contains(r.Stderr, "not valid JSON") || !contains(r.Stderr, "restore it or remove it") || contains(r.Stderr, "giving up") {
		t.Fatalf("%s\nwant exit 3 at once naming web-0 and saying what to do", r)
	}
	if p := listPodsByName(t, ns, "app=web")["web-0"]; p.Spec.Containers[0].Image != appV1 {
		t.Errorf("web-0 on %s, want it left alone on %s", p.Spec.Containers[0].Image, appV1)
	}
}

// TestRollbackPastCorruptStates: a pod the rollout never touched with an unreadable state is
// skipped with a warning; a touched one stops the rollback (exit 3) saying what to do, after the
// other pods went back.
func TestRollbackPastCorruptStates(t *testing.T) {
	t.Run("untouched", func(t *testing.T) {
		ns := env.Namespace(t)
		orig := createStatefulSet(t, ns, "web", 4)
		before := identities(t, ns, "app=web")
		touched := stopAfterFirstBatch(t, ns, appV2)
		if touched["web-0"] {
			t.Fatalf("web-0 was touched by the first batch (%v); the test needs it untouched", touched)
		}
		setState(t, ns, "web-0", "{not json")
		r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web")
		if r.Code != 0 || !contains(r.Stderr, "web-0") {
			t.Fatalf("%s\nwant exit 0 with a warning about web-0", r)
		}
		after := identities(t, ns, "app=web")
		for name := range touched {
			if after[name].imageIDs["app"] != before[name].imageIDs["app"] {
				t.Errorf("pod %s: imageID %s, want %s", name, after[name].imageIDs["app"], before[name].imageIDs["app"])
			}
		}
		sts := waitStatefulSet(t, ns, "web", "restored", func(s *appsv1.StatefulSet) bool { return s.Status.ObservedGeneration == s.Generation })
		if sts.Spec.UpdateStrategy.Type != orig.Spec.UpdateStrategy.Type || sts.Spec.Template.Spec.Containers[0].Image != appV1 {
			t.Errorf("strategy %s template %s; want the workload restored", sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.Containers[0].Image)
		}
	})
	t.Run("touched", func(t *testing.T) {
		ns := env.Namespace(t)
		createStatefulSet(t, ns, "web", 3)
		before := identities(t, ns, "app=web")
		if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2); r.Code != 0 {
			t.Fatalf("run: %s", r)
		}
		setState(t, ns, "web-1", "{not json")
		r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web")
		if r.Code != 3 || !contains(r.Stderr, "/web-1: annotation "+inplace.StateAnnotation) || !contains(r.Stderr, "restore it or remove it") || contains(r.Stderr, "giving up") {
			t.Fatalf("%s\nwant exit 3 at once naming web-1 and saying what to do", r)
		}
		after := identities(t, ns, "app=web")
		for _, name := range []string{"web-0", "web-2"} {
			if after[name].imageIDs["app"] != before[name].imageIDs["app"] {
				t.Errorf("pod %s: imageID %s, want it back on %s", name, after[name].imageIDs["app"], before[name].imageIDs["app"])
			}
		}
		if lock := stsLock(t, ns, "web"); !contains(lock, `"phase":"RollingBack"`) {
			t.Errorf("lock %s, want it still rolling back", lock)
		}
	})
}

// listPodsByName lists the pods matching selector by name.
func listPodsByName(t *testing.T, ns, selector string) map[string]corev1.Pod {
	t.Helper()
	out := map[string]corev1.Pod{}
	for _, p := range listPods(t, ns, selector) {
		out[p.Name] = p
	}
	return out
}

// TestRunAfterRollbackStartsAnew: after a rollback, the same run starts a new rollout.
func TestRunAfterRollbackStartsAnew(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	args := []string{"-n", ns, "--target", "statefulset/web"}
	run := append([]string{"run", "--image", "app=" + appV2}, args...)
	if r := runCLI(t, run...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	first := stsLock(t, ns, "web")
	if r := runCLI(t, append([]string{"rollback"}, args...)...); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	// What the pods run after the rollback (v1, pinned by digest) is the new rollout's before.
	rolledBack := map[string]string{}
	for _, p := range listPods(t, ns, "app=web") {
		rolledBack[p.Name] = p.Spec.Containers[0].Image
	}
	r := runCLI(t, run...)
	if r.Code != 0 {
		t.Fatalf("run after the rollback: %s; want a new rollout", r)
	}
	podsOnImage(t, ns, "app=web", appV2)
	lock := stsLock(t, ns, "web")
	if lock == first || !contains(lock, `"phase":"Succeeded"`) {
		t.Errorf("lock %s after %s; want a new, succeeded rollout", lock, first)
	}
	for _, p := range listPods(t, ns, "app=web") {
		st := stateOf(t, &p)
		if st == nil || inplace.Judged(&p, st, time.Now()) != inplace.StageUpdated || !contains(lock, `"rolloutID":"`+st.RolloutID+`"`) || st.Containers[0].BeforeImage != rolledBack[p.Name] {
			t.Errorf("pod %s: state %+v; want Updated by the new rollout from %s", p.Name, st, rolledBack[p.Name])
		}
	}
}

// createBarePods creates pods labelled app=NAME named NAME-i with the given restart policy and
// owner, and waits until they are Ready.
func createBarePods(t *testing.T, ns, name string, n int, policy corev1.RestartPolicy, owner *metav1.OwnerReference) {
	t.Helper()
	tmpl := template(map[string]string{"app": name})
	tmpl.Spec.RestartPolicy = policy
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		if owner != nil {
			pod.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, pod.Name, 30*time.Second, "Ready", cluster.PodReady)
	}
}

// lockConfigMaps counts the lock ConfigMaps of label-selected rollouts in the namespace.
func lockConfigMaps(t *testing.T, ns string) int {
	t.Helper()
	cms, err := env.Client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range cms.Items {
		if _, ok := cm.Annotations[workload.LockAnnotation]; ok {
			n++
		}
	}
	return n
}

// TestPodsThatCannotBeUpdatedAreRefusedUpFront: under --target pods, a pod whose restartPolicy
// is not Always, or that a controller owns, is refused before anything is written.
func TestPodsThatCannotBeUpdatedAreRefusedUpFront(t *testing.T) {
	ns := env.Namespace(t)
	createBarePods(t, ns, "never", 2, corev1.RestartPolicyNever, nil)
	createBarePods(t, ns, "onfailure", 1, corev1.RestartPolicyOnFailure, nil)
	// An owner the pods point to as their controller: a ConfigMap, so no controller acts on it.
	owner, err := env.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keeper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createBarePods(t, ns, "owned", 2, corev1.RestartPolicyAlways,
		&metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)})

	for _, tt := range []struct{ selector, want string }{
		{"app=never", "restartPolicy is Never"},
		{"app=onfailure", "restartPolicy is OnFailure"},
		{"app=owned", "ConfigMap/keeper"},
	} {
		t.Run(tt.selector, func(t *testing.T) {
			before := resourceVersions(t, ns)
			r := runCLI(t, "run", "-n", ns, "--target", "pods", "-l", tt.selector, "--image", "app="+appV2)
			pod := strings.TrimPrefix(tt.selector, "app=") + "-0"
			if r.Code != 2 || !contains(r.Stderr, pod) || !contains(r.Stderr, tt.want) {
				t.Fatalf("%s\nwant exit 2 naming %s and %q", r, pod, tt.want)
			}
			if tt.selector == "app=owned" && !contains(r.Stderr, "--allow-owned") {
				t.Errorf("%s\nwant the message to name --allow-owned", r)
			}
			if after := resourceVersions(t, ns); !equalMaps(before, after) {
				t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
			}
			if n := lockConfigMaps(t, ns); n != 0 {
				t.Errorf("%d lock ConfigMaps written, want none", n)
			}
		})
	}
	if r := runCLI(t, "run", "-n", ns, "--target", "pods", "-l", "app=owned", "--image", "app="+appV2, "--allow-owned"); r.Code != 0 {
		t.Fatalf("run --allow-owned: %s", r)
	}
	podsOnImage(t, ns, "app=owned", appV2)
}

// TestPermanentAPIErrorsFailAtOnce: errors that retrying cannot fix end the command at once, not
// as an incomplete rollback after minutes of retries: a name no object can have is bad input
// (exit 2) said before any request; a write the API server rejects ends with exit 7 and the
// API's message, nothing changed.
func TestPermanentAPIErrorsFailAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 1)
	t.Run("invalid name", func(t *testing.T) {
		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web/extra", "--image", "app="+appV2)
		if r.Code != 2 || !contains(r.Stderr, "web/extra") || !contains(r.Stderr, "not a valid name") || contains(r.Stderr, "giving up") {
			t.Fatalf("%s\nwant exit 2 at once naming web/extra", r)
		}
	})
	t.Run("rejected write", func(t *testing.T) {
		// Annotations close to the API server's 256 KiB limit: the lock no longer fits, and the
		// server rejects the write (422) however often it is sent.
		filler := strings.Repeat("x", 262144-300)
		patch := `{"metadata":{"annotations":{"filler":"` + filler + `"}}}`
		if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		before := resourceVersions(t, ns)
		r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2)
		if r.Code != 7 || !contains(r.Stderr, "annotations") || !contains(r.Stderr, "nothing changed") || contains(r.Stderr, "giving up") || contains(r.Stderr, "rollback incomplete") {
			t.Fatalf("%s\nwant exit 7 at once with the API's message", r)
		}
		if after := resourceVersions(t, ns); !equalMaps(before, after) {
			t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// TestSupersededRunSaysSo: a run whose rollout another run of the same holder supersedes ends
// with its own exit code and message, not as bad input.
func TestSupersededRunSaysSo(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 4)
	var stderr bytes.Buffer
	first := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,50%,100%", "--soak", "20s")
	env.WaitForPod(t, ns, "web-3", 60*time.Second, "Updated", func(p *corev1.Pod) bool {
		st, _ := inplace.ReadState(p)
		return st != nil && inplace.Judged(p, st, time.Now()) == inplace.StageUpdated
	})
	if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV3, "--supersede"); r.Code != 0 {
		t.Fatalf("superseding run: %s", r)
	}
	_ = first.Wait()
	if code := first.ProcessState.ExitCode(); code != 5 || !strings.Contains(stderr.String(), "superseded by rollout") {
		t.Fatalf("superseded run exited %d, want 5 saying it was superseded:\n%s", code, clitest.LastLines(stderr.String(), 10))
	}
	podsOnImage(t, ns, "app=web", appV3)
}
