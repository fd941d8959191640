package rollout_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// TestRollbackAfterSuccess undoes a finished rollout: every pod goes back to the digest it ran
// before, in place, and the StatefulSet gets its template and strategy back.
func TestRollbackAfterSuccess(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 4)
	before := identities(t, ns, "app=web")
	if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "50%,100%"); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web", "--max-unavailable", "2")
	if r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "app=web")
	checkInPlace(t, before, after, 2)
	for name, b := range before {
		if after[name].imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: imageID %s, want the original %s", name, after[name].imageIDs["app"], b.imageIDs["app"])
		}
	}
	for _, p := range listPods(t, ns, "app=web") {
		if st := stateOf(t, &p); st == nil || st.Stage != inplace.StageRolledBack {
			t.Errorf("pod %s: state %+v, want RolledBack", p.Name, st)
		}
	}
	sts := waitStatefulSet(t, ns, "web", "back at the original revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision == orig.Status.UpdateRevision &&
			s.Status.CurrentRevision == s.Status.UpdateRevision && s.Status.UpdatedReplicas == 4
	})
	if !equality.Semantic.DeepEqual(sts.Spec.Template, orig.Spec.Template) || !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("template %v or strategy %v not restored", sts.Spec.Template.Spec.Containers, sts.Spec.UpdateStrategy)
	}
	time.Sleep(2 * time.Second)
	checkInPlace(t, before, identities(t, ns, "app=web"), 2)
	if r := runCLI(t, "rollback", "-n", ns, "--target", "statefulset/web"); r.Code != 0 || !contains(r.Stdout, "rolled back") {
		t.Errorf("a second rollback: %s; want exit 0 saying it is rolled back", r)
	}
}

// TestLabelSelectedPods rolls out to bare pods chosen by a label selector: no controller to
// freeze, the lock on a ConfigMap.
func TestLabelSelectedPods(t *testing.T) {
	ns := env.Namespace(t)
	tmpl := template(map[string]string{"app": "loose"})
	for i := range 3 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("loose-%d", i), Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, pod.Name, 30*time.Second, "Ready", cluster.PodReady)
	}
	before := identities(t, ns, "app=loose")
	args := []string{"-n", ns, "--target", "pods", "--selector", "app=loose"}
	if r := runCLI(t, append([]string{"run", "--image", "app=" + appV2, "--batches", "1,100%"}, args...)...); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=loose"), 1)
	podsOnImage(t, ns, "app=loose", appV2)
	cms, err := env.Client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks := 0
	for _, cm := range cms.Items {
		if cm.Annotations["inplace-rollout.io/selector"] == "app=loose" {
			locks++
		}
	}
	if locks != 1 {
		t.Errorf("%d lock ConfigMaps for the selector, want 1", locks)
	}
	if r := runCLI(t, append([]string{"rollback"}, args...)...); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	after := identities(t, ns, "app=loose")
	checkInPlace(t, before, after, 2)
	for name, b := range before {
		if after[name].imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s not back on its original digest", name)
		}
	}
}

// TestDeploymentRollbackAfterSuccess undoes a finished Deployment rollout: the pods go back in
// place and the Deployment keeps its one ReplicaSet.
func TestDeploymentRollbackAfterSuccess(t *testing.T) {
	ns := env.Namespace(t)
	createDeployment(t, ns, "api", 3)
	before := identities(t, ns, "app=api")
	if r := runCLI(t, "run", "-n", ns, "--target", "deployment/api", "--image", "app="+appV2); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	waitDeployment(t, ns, "api", 3)
	// A pod lost after the rollout comes back from the new template: the rollback must take it
	// back too, in place, or it would run the new image under the old template for good.
	deleteAndWaitRecreated(t, ns, "app=api", before)
	now := identities(t, ns, "app=api")
	var recreated string
	for name := range now {
		if _, ok := before[name]; !ok {
			recreated = name
		}
	}
	for name := range before {
		if _, ok := now[name]; !ok {
			delete(before, name) // the lost one
		}
	}
	recreatedBefore := now[recreated]

	if r := runCLI(t, "rollback", "-n", ns, "--target", "deployment/api"); r.Code != 0 {
		t.Fatalf("rollback: %s", r)
	}
	got := waitDeployment(t, ns, "api", 3)
	time.Sleep(3 * time.Second)
	after := identities(t, ns, "app=api")
	if _, ok := after[recreated]; !ok {
		t.Fatalf("pod %s, created after the rollout, is gone: %v", recreated, after)
	}
	afterOld := maps.Clone(after)
	delete(afterOld, recreated)
	checkInPlace(t, before, afterOld, 2)
	var v1Digest string
	for name, b := range before {
		v1Digest = b.imageIDs["app"]
		if after[name].imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s not back on its original digest", name)
		}
	}
	if a := after[recreated]; a.uid != recreatedBefore.uid || a.imageIDs["app"] != v1Digest || a.restarts["app"] != recreatedBefore.restarts["app"]+1 {
		t.Errorf("pod %s, created on %s after the rollout: %+v; want the same pod on %s, restarted once", recreated, appV2, a, v1Digest)
	}
	if got.Spec.Paused || got.Spec.Template.Spec.Containers[0].Image != appV1 {
		t.Errorf("deployment paused=%v image %s; want unpaused on %s", got.Spec.Paused, got.Spec.Template.Spec.Containers[0].Image, appV1)
	}
	rsList, err := env.Client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=api"})
	if err != nil || len(rsList.Items) != 1 {
		t.Errorf("%d ReplicaSets (%v), want exactly 1", len(rsList.Items), err)
	}
}
