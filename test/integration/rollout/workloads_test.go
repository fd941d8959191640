package rollout_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

func TestStatefulSetRollout(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 6)
	before := identities(t, ns, "app=web")

	// plan shows the batches, highest ordinal first, and writes nothing.
	rvs := resourceVersions(t, ns)
	r := runCLI(t, "plan", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,50%,100%")
	if r.Code != 0 || !contains(r.Stdout, "batch 1 (up to 1 pods): [web-5]") || !contains(r.Stdout, "batch 2 (up to 3 pods): [web-4 web-3]") {
		t.Fatalf("plan: %s", r)
	}
	if !equalMaps(rvs, resourceVersions(t, ns)) {
		t.Fatal("plan wrote to the cluster")
	}

	results := t.TempDir()
	r = runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,50%,100%", "--results-dir", results)
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	for name, want := range map[string]string{"phase": "Succeeded", "updated-pods": "6", "rolled-back": "0"} {
		if got, err := os.ReadFile(filepath.Join(results, name)); err != nil || string(got) != want {
			t.Errorf("result %s = %q (%v), want %q", name, got, err, want)
		}
	}
	r = runCLI(t, "status", "-n", ns, "--target", "statefulset/web", "-o", "json")
	var report struct {
		Rollout struct{ Phase string }
		Pods    []struct {
			Name, Stage string
			Containers  []struct{ BeforeImage, AfterImage, AfterImageID string }
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &report); err != nil || r.Code != 0 {
		t.Fatalf("status -o json: %v\n%s", err, r)
	}
	if report.Rollout.Phase != "Succeeded" || len(report.Pods) != 6 {
		t.Errorf("status: rollout %q with %d pods, want Succeeded with 6", report.Rollout.Phase, len(report.Pods))
	}
	for _, p := range report.Pods {
		if p.Stage != "Updated" || len(p.Containers) != 1 || p.Containers[0].BeforeImage != appV1 || p.Containers[0].AfterImageID == "" {
			t.Errorf("status of pod %s: %+v", p.Name, p)
		}
	}
	r = runCLI(t, "status", "-n", ns, "--target", "statefulset/web")
	if r.Code != 0 || !contains(r.Stdout, "by cli: Succeeded") {
		t.Errorf("status: %s", r)
	}
	for _, name := range []string{"web-0", "web-5"} {
		if !regexp.MustCompile(`(?m)^` + name + `\s+true\s+Updated\s+app\s+` + regexp.QuoteMeta(appV1) + `\s+` + regexp.QuoteMeta(appV2)).MatchString(r.Stdout) {
			t.Errorf("status table has no row for %s Ready, Updated, app %s -> %s:\n%s", name, appV1, appV2, r.Stdout)
		}
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	podsOnImage(t, ns, "app=web", appV2)

	sts := waitStatefulSet(t, ns, "web", "6 updated replicas at one revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 6 && s.Status.ReadyReplicas == 6 &&
			s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	if !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("update strategy %+v, want the original %+v", sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
	}
	if sts.Spec.Template.Spec.Containers[0].Image != appV2 {
		t.Errorf("template image %s, want %s", sts.Spec.Template.Spec.Containers[0].Image, appV2)
	}
	for _, p := range listPods(t, ns, "app=web") {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
			t.Errorf("pod %s at revision %s, want %s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], sts.Status.UpdateRevision)
		}
	}
	// The controller reconciles the restored strategy without recreating anything.
	time.Sleep(2 * time.Second)
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)

	// A pod deleted afterwards comes back on the new image.
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "web-0", 60*time.Second, "recreated and Ready on "+appV2, func(p *corev1.Pod) bool {
		return string(p.UID) != before["web-0"].uid && p.Spec.Containers[0].Image == appV2 && cluster.PodReady(p)
	})
}

func TestDaemonSetRollout(t *testing.T) {
	ns := env.Namespace(t)
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)},
	}
	orig, err := env.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := int32(len(env.Sim.NodeNames()))
	waitDaemonSet(t, ns, "agent", func(d *appsv1.DaemonSet) bool {
		return d.Status.NumberReady == nodes && d.Status.UpdatedNumberScheduled == nodes
	})
	before := identities(t, ns, "app=agent")

	r := runCLI(t, "run", "-n", ns, "--target", "daemonset/agent", "--image", "app="+appV2, "--batches", "1,100%")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	podsOnImage(t, ns, "app=agent", appV2)
	got := waitDaemonSet(t, ns, "agent", func(d *appsv1.DaemonSet) bool {
		return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedNumberScheduled == nodes && d.Status.NumberReady == nodes
	})
	if !equality.Semantic.DeepEqual(got.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("update strategy %+v, want the original %+v", got.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != appV2 {
		t.Errorf("template image %s, want %s", img, appV2)
	}
	// Both labels the controller judges pods by carry the new revision.
	revs, err := env.Client.AppsV1().ControllerRevisions(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil {
		t.Fatal(err)
	}
	var newest *appsv1.ControllerRevision
	for i := range revs.Items {
		if newest == nil || revs.Items[i].Revision > newest.Revision {
			newest = &revs.Items[i]
		}
	}
	for _, p := range listPods(t, ns, "app=agent") {
		if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] ||
			p.Labels["pod-template-generation"] != got.Annotations[appsv1.DeprecatedTemplateGeneration] {
			t.Errorf("pod %s labels %v, want revision %s and template generation %s", p.Name, p.Labels,
				newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey], got.Annotations[appsv1.DeprecatedTemplateGeneration])
		}
	}
	time.Sleep(2 * time.Second)
	checkInPlace(t, before, identities(t, ns, "app=agent"), 1)
	deleteAndWaitRecreated(t, ns, "app=agent", before)
}

// deleteAndWaitRecreated deletes one pod of a finished rollout and waits for its controller to
// replace it with a pod on the new image.
func deleteAndWaitRecreated(t *testing.T, ns, selector string, before map[string]identity) {
	t.Helper()
	victim := listPods(t, ns, selector)[0]
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 60*time.Second, "a pod replacing "+victim.Name+" Ready on "+appV2, func(context.Context) (bool, error) {
		pods := listPods(t, ns, selector)
		fresh := 0
		for _, p := range pods {
			if _, old := before[p.Name]; old && before[p.Name].uid == string(p.UID) {
				continue
			}
			if p.Spec.Containers[0].Image != appV2 || !cluster.PodReady(&p) {
				return false, nil
			}
			fresh++
		}
		return fresh == 1 && len(pods) == len(before), nil
	})
}

func waitDaemonSet(t *testing.T, ns, name string, cond func(*appsv1.DaemonSet) bool) *appsv1.DaemonSet {
	t.Helper()
	var got *appsv1.DaemonSet
	cluster.WaitFor(t, 60*time.Second, "daemonset "+name, func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		got = d
		return err == nil && cond(d), err
	})
	return got
}

func TestDeploymentRollout(t *testing.T) {
	ns := env.Namespace(t)
	createDeployment(t, ns, "api", 4)
	before := identities(t, ns, "app=api")

	most := watchUpdating(t, ns, "app=api")
	r := runCLI(t, "run", "-n", ns, "--target", "deployment/api", "--image", "app="+appV2, "--batches", "25%,100%", "--max-unavailable", "2")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	if n := most(); n != 2 {
		t.Errorf("at most %d pods were updating at once, want exactly --max-unavailable 2", n)
	}
	podsOnImage(t, ns, "app=api", appV2)
	got := waitDeployment(t, ns, "api", 4)
	if got.Spec.Paused {
		t.Error("deployment left paused")
	}
	// Give the Deployment controller time to act on the new template; it must adopt the
	// existing ReplicaSet rather than roll out a new one.
	time.Sleep(3 * time.Second)
	got = waitDeployment(t, ns, "api", 4)
	rsList, err := env.Client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=api"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rsList.Items) != 1 {
		t.Errorf("%d ReplicaSets after the rollout, want exactly 1", len(rsList.Items))
	}
	if got.Status.UpdatedReplicas != 4 {
		t.Errorf("updatedReplicas = %d, want 4", got.Status.UpdatedReplicas)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != appV2 {
		t.Errorf("deployment template image %s, want %s", img, appV2)
	}
	if len(rsList.Items) == 1 {
		if img := rsList.Items[0].Spec.Template.Spec.Containers[0].Image; img != appV2 {
			t.Errorf("replicaset template image %s, want %s", img, appV2)
		}
	}
	checkInPlace(t, before, identities(t, ns, "app=api"), 1)
	deleteAndWaitRecreated(t, ns, "app=api", before)
}

// watchUpdating watches the pods and returns a function that reports the largest number of
// them seen in the middle of an update (stage Preparing, Draining or Updating) at once.
func watchUpdating(t *testing.T, ns, selector string) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		updating := map[string]bool{}
		most := 0
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			st, _ := inplace.ReadState(p)
			updating[p.Name] = st != nil && !inplace.Judged(p, st, time.Now()).Terminal()
			n := 0
			for _, u := range updating {
				if u {
					n++
				}
			}
			most = max(most, n)
		}
		done <- most
	}()
	stop := func() int {
		cancel()
		w.Stop()
		return <-done
	}
	t.Cleanup(func() { cancel() })
	return stop
}

func waitDeployment(t *testing.T, ns, name string, replicas int32) *appsv1.Deployment {
	t.Helper()
	var got *appsv1.Deployment
	cluster.WaitFor(t, 60*time.Second, "deployment "+name+" available", func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		got = d
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == replicas && d.Status.UpdatedReplicas == replicas, err
	})
	return got
}

func TestCrashInBatchTwoRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 6)
	before := identities(t, ns, "app=web")
	// Batches 1,50%,100% take web-5, then web-4 and web-3: v2 crashes in web-3 only.
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "web-3", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+kubeletsim.CrashImagesAnnotation+`":"`+appV2+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	results := t.TempDir()
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2, "--batches", "1,50%,100%", "--results-dir", results)
	if r.Code != 1 {
		t.Fatalf("run: %s; want exit 1", r)
	}
	for name, want := range map[string]string{"phase": "RolledBack", "updated-pods": "0", "rolled-back": "3", "message": "CrashLoopBackOff"} {
		if got, err := os.ReadFile(filepath.Join(results, name)); err != nil || !strings.Contains(string(got), want) {
			t.Errorf("result %s = %q (%v), want %q", name, got, err, want)
		}
	}
	after := identities(t, ns, "app=web")
	for name, b := range before {
		a := after[name]
		if a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s, app imageID %s->%s; want the same pod on the same digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
		}
	}
	touched := 0
	for _, p := range listPods(t, ns, "app=web") {
		st := stateOf(t, &p)
		if st == nil {
			continue
		}
		touched++
		if st.Stage != inplace.StageRolledBack {
			t.Errorf("pod %s: stage %s, want RolledBack", p.Name, st.Stage)
		}
		if !cluster.PodReady(&p) {
			t.Errorf("pod %s not Ready after the rollback", p.Name)
		}
		var reasons []string
		events, _ := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		if !slices.Contains(reasons, inplace.EventRolledBack) {
			t.Errorf("pod %s: events %v, want %s", p.Name, reasons, inplace.EventRolledBack)
		}
	}
	if touched != 3 {
		t.Errorf("%d pods touched, want 3 (batches 1 and 2)", touched)
	}
	// Reverse order: batch 2 (web-3, which crashed, started after web-4) before batch 1 (web-5).
	var rolledBackAt []time.Time
	for _, name := range []string{"web-3", "web-4", "web-5"} {
		p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rolledBackAt = append(rolledBackAt, stateOf(t, p).StageAt)
	}
	if !slices.IsSortedFunc(rolledBackAt, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("web-3, web-4, web-5 rolled back at %v, want them in that order", rolledBackAt)
	}
	sts := waitStatefulSet(t, ns, "web", "reconciled", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 6 && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	if !equality.Semantic.DeepEqual(sts.Spec.Template, orig.Spec.Template) || !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("template or strategy not restored:\ntemplate %+v\nstrategy %+v", sts.Spec.Template.Spec.Containers, sts.Spec.UpdateStrategy)
	}
	if sts.Status.UpdateRevision != orig.Status.UpdateRevision {
		t.Errorf("updateRevision %s, want the original %s", sts.Status.UpdateRevision, orig.Status.UpdateRevision)
	}
	time.Sleep(2 * time.Second)
	for name, a := range identities(t, ns, "app=web") {
		if a.uid != before[name].uid {
			t.Errorf("pod %s recreated after the workload was restored", name)
		}
	}
}

// TestPodsRecreatedDuringRollout deletes a pod the rollout has not reached yet. A StatefulSet
// recreates it from the new template (counted as updated, never touched); a paused
// Deployment's ReplicaSet recreates it from the old template (updated in a later batch).
func TestPodsRecreatedDuringRollout(t *testing.T) {
	tests := []struct {
		kind        string
		wantTouched bool
	}{
		{"statefulset", false},
		{"deployment", true},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			ns := env.Namespace(t)
			labels := map[string]string{"app": "web"}
			if tt.kind == "statefulset" {
				createStatefulSet(t, ns, "web", 4)
			} else {
				dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
					Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](4), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)}}
				if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				waitDeployment(t, ns, "web", 4)
			}
			before := identities(t, ns, "app=web")
			cmd := startCLI(t, "run", "-n", ns, "--target", tt.kind+"/web", "--image", "app="+appV2, "--batches", "1,100%", "--soak", "2s")
			// While the first pod soaks, delete a pod the rollout has not touched.
			var victim string
			cluster.WaitFor(t, 60*time.Second, "the first pod updating", func(context.Context) (bool, error) {
				pods := listPods(t, ns, "app=web")
				for _, p := range pods {
					if stateOf(t, &p) == nil {
						victim = p.Name
					}
				}
				return len(pods) == 4 && victim != "" && len(pods) > 0 && anyTouched(t, pods), nil
			})
			if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), victim, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("run: %v", err)
			}
			podsOnImage(t, ns, "app=web", appV2)
			var recreated []string
			for _, p := range listPods(t, ns, "app=web") {
				if b, ok := before[p.Name]; ok && b.uid == string(p.UID) {
					continue
				}
				recreated = append(recreated, p.Name)
				if touched := stateOf(t, &p) != nil; touched != tt.wantTouched {
					t.Errorf("recreated pod %s: touched by the rollout = %v, want %v", p.Name, touched, tt.wantTouched)
				}
			}
			if len(recreated) != 1 {
				t.Errorf("recreated pods %v, want exactly one (the deleted %s)", recreated, victim)
			}
		})
	}
}

func anyTouched(t *testing.T, pods []corev1.Pod) bool {
	t.Helper()
	for _, p := range pods {
		if stateOf(t, &p) != nil {
			return true
		}
	}
	return false
}
