package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestRollbackFindsPodsThatLeftTheSelector: a pod the rollout updated and whose label was then
// removed still goes back on rollback.
func TestRollbackFindsPodsThatLeftTheSelector(t *testing.T) {
	ns := env.Namespace(t)
	createBarePods(t, ns, "loose", 3, corev1.RestartPolicyAlways, nil)
	before := identities(t, ns, "app=loose")
	args := []string{"-n", ns, "--target", "pods", "-l", "app=loose"}
	if r := runCLI(t, append([]string{"run", "--image", "app=" + appV2}, args...)...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "loose-2", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, append([]string{"rollback"}, args...)...); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "")
	for name, b := range before {
		if a := after[name]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s imageID %s->%s; want the same pod back on its first digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
		}
	}
}

// TestRollbackRefusesAnEditedBeforeImage: a revert goes only to an image the rollout recorded
// as a before image; a pod whose state was edited to name another stops for a person (exit 3)
// and the others still go back.
func TestRollbackRefusesAnEditedBeforeImage(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := stateOf(t, p)
	const evil = "registry.example/evil:v1"
	st.Containers[0].BeforeImage = evil
	data, _ := json.Marshal(st)
	setState(t, ns, "web-1", string(data))

	r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web")
	if r.Code != 3 || !contains(r.Stderr, "web-1") || !contains(r.Stderr, `container "app"`) || !contains(r.Stderr, evil) || !contains(r.Stderr, appV1) {
		t.Fatalf("%s\nwant exit 3 naming web-1, container app, %s and the recorded %s", r, evil, appV1)
	}
	after := identities(t, ns, "app=web")
	for _, name := range []string{"web-0", "web-2"} {
		if after[name].imageIDs["app"] != before[name].imageIDs["app"] {
			t.Errorf("pod %s: imageID %s, want it back on %s", name, after[name].imageIDs["app"], before[name].imageIDs["app"])
		}
	}
	if p := listPodsByName(t, ns, "app=web")["web-1"]; p.Spec.Containers[0].Image == evil {
		t.Errorf("web-1 was put on %s", evil)
	}
}

// TestRollbackOfPodsWithDifferentBeforeImages: label-selected pods that ran different images
// each go back to their own.
func TestRollbackOfPodsWithDifferentBeforeImages(t *testing.T) {
	ns := env.Namespace(t)
	tmpl := template(map[string]string{"app": "mixed"})
	for i, image := range []string{appV1, appV3, appV1} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mixed-%d", i), Namespace: ns, Labels: tmpl.Labels}, Spec: *tmpl.Spec.DeepCopy()}
		pod.Spec.Containers[0].Image = image
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, pod.Name, 30*time.Second, "Ready", cluster.PodReady)
	}
	before := identities(t, ns, "app=mixed")
	args := []string{"-n", ns, "--target", "pods", "-l", "app=mixed"}
	if r := runCLI(t, append([]string{"run", "--image", "app=" + appV2}, args...)...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	if r := runCLI(t, append([]string{"rollback"}, args...)...); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "app=mixed")
	for name, b := range before {
		if a := after[name]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s imageID %s->%s; want the same pod back on its first digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
		}
	}
	for _, p := range listPods(t, ns, "app=mixed") {
		if st := stateOf(t, &p); st == nil || st.Stage != inplace.StageRolledBack {
			t.Errorf("pod %s: state %+v, want RolledBack", p.Name, st)
		}
	}
}

// TestRollbackFindsPodsTheirControllerReleased: a Deployment pod the rollout updated and whose
// label was then edited away is released by its ReplicaSet; rollback still puts it back.
func TestRollbackFindsPodsTheirControllerReleased(t *testing.T) {
	ns := env.Namespace(t)
	createDeployment(t, ns, "api", 2)
	before := identities(t, ns, "app=api")
	if r := runCLI(t, "run", "-n", ns, "--target", "deployment/api", "--image", "app="+appV2); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	waitDeployment(t, ns, "api", 2)
	var released string
	for name := range before {
		released = name
		break
	}
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), released, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, released, 30*time.Second, "released by its ReplicaSet", func(p *corev1.Pod) bool { return metav1.GetControllerOf(p) == nil })
	waitDeployment(t, ns, "api", 2) // a replacement, from the ReplicaSet's template

	if r := runCLI(t, "rollback", "-n", ns, "--target", "deployment/api"); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "")
	if a, b := after[released], before[released]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
		t.Errorf("released pod %s: UID %s->%s imageID %s->%s; want the same pod back on its first digest", released, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
	}
}

// TestRollbackReportsTouchedPodsItCannotRevert: the lock records the pods the rollout touched,
// so a touched pod whose state annotation was removed (and that may have left the selector too)
// is not passed over in silence: the rollback names it and exits 3, the others go back, and
// once the pod is back on its image by hand the rollback finishes.
func TestRollbackReportsTouchedPodsItCannotRevert(t *testing.T) {
	for _, tc := range []struct {
		name string
		// unlabel removes the pod's label too, so that it leaves the selector.
		unlabel bool
	}{
		{name: "state removed"},
		{name: "state removed and label removed", unlabel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			createBarePods(t, ns, "loose", 3, corev1.RestartPolicyAlways, nil)
			before := identities(t, ns, "app=loose")
			args := []string{"-n", ns, "--target", "pods", "-l", "app=loose"}
			if r := runCLI(t, append([]string{"run", "--image", "app=" + appV2}, args...)...); r.Code != 0 {
				t.Fatalf("run: %s", r)
			}
			// As `kubectl annotate pod loose-1 inplace-rollout.io/state-` does.
			patch := `{"metadata":{"annotations":{"` + inplace.StateAnnotation + `":null}}}`
			if tc.unlabel {
				patch = `{"metadata":{"annotations":{"` + inplace.StateAnnotation + `":null},"labels":{"app":null}}}`
			}
			if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "loose-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, append([]string{"rollback"}, args...)...)
			if r.Code != 3 || !contains(r.Stderr, "loose-1") || !contains(r.Stderr, "rollback incomplete") {
				t.Fatalf("%s\nwant exit 3, rollback incomplete, naming loose-1", r)
			}
			after := identities(t, ns, "")
			for _, name := range []string{"loose-0", "loose-2"} {
				if a, b := after[name], before[name]; a.imageIDs["app"] != b.imageIDs["app"] {
					t.Errorf("pod %s: imageID %s, want it back on %s", name, a.imageIDs["app"], b.imageIDs["app"])
				}
			}

			// A person puts loose-1 back by hand: the rollback then finishes.
			if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "loose-1", types.StrategicMergePatchType,
				[]byte(`{"spec":{"containers":[{"name":"app","image":"`+appV1+`"}]}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if r := runCLI(t, append([]string{"rollback"}, args...)...); r.Code != 0 {
				t.Fatalf("rollback after loose-1 was put back by hand: %s", r)
			}
		})
	}
}
