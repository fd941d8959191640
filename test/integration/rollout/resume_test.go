package rollout_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// startCLI starts inplace-rollout in the background.
func startCLI(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return clitest.Start(t, env, cli, nil, args...)
}

func TestKilledCommandResumes(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 12)
	before := identities(t, ns, "app=web")
	// The soak makes the batches wait, so some kills land between batches too.
	args := []string{"run", "-n", ns, "--target", "statefulset/web", "--image", "app=" + appV2, "--batches", "25%,50%,100%", "--max-unavailable", "2", "--soak", "500ms"}

	landed := map[string]int{} // what the cluster showed right after each kill
	midway := killRuns(t, ns, args, 30, rand.New(rand.NewPCG(7, 11)), 100*time.Millisecond, func() { landed[killedAt(t, ns)]++ })
	t.Logf("kills landed: %v", landed)
	updated := 0
	for _, p := range listPods(t, ns, "app=web") {
		if p.Spec.Containers[0].Image == appV2 {
			updated++
		}
	}
	t.Logf("%d of 30 runs were killed before they finished; %d of 12 pods were on the new image before the final run", midway, updated)
	if midway == 0 || updated == 0 {
		t.Fatal("no run was killed mid-way, or none made progress: the test exercised nothing")
	}
	if r := runCLI(t, args...); r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	podsOnImage(t, ns, "app=web", appV2)
	waitStatefulSet(t, ns, "web", "12 updated replicas at one revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 12 && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
}

// killRuns starts the CLI with args runs times, and kills each run with SIGKILL at a random
// moment (up to maxDelay) after its first write, however slow the machine is: a kill before any
// write would exercise nothing. A run that ends first is let be. after, if set, looks at the
// cluster after each run. It returns how many runs were killed.
func killRuns(t *testing.T, ns string, args []string, runs int, rng *rand.Rand, maxDelay time.Duration, after func()) int {
	t.Helper()
	killed := 0
	for range runs {
		was := written(t, ns)
		cmd := startCLI(t, args...)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		if waitForAWrite(t, ns, was, exited) {
			time.Sleep(time.Duration(rng.Int64N(int64(maxDelay))))
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		<-exited
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			killed++
		}
		if after != nil {
			after()
		}
	}
	return killed
}

// written is what runs of the rollout of web write: the lock, and each pod's state and image.
func written(t *testing.T, ns string) string {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(sts.Annotations[workload.LockAnnotation])
	for _, p := range listPods(t, ns, "app=web") {
		b.WriteString("\n" + p.Name + " " + p.Spec.Containers[0].Image + " " + p.Annotations[inplace.StateAnnotation])
	}
	return b.String()
}

// waitForAWrite waits until what runs write differs from before (true), or the run exited
// (false); a run that writes nothing within a minute fails the test.
func waitForAWrite(t *testing.T, ns, before string, exited <-chan struct{}) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for written(t, ns) == before {
		if time.Now().After(deadline) {
			t.Fatal("a run wrote nothing to the rollout of web within a minute")
		}
		select {
		case <-exited:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// killedAt names where a rollout of web stands: not started, a pod mid-update, between pods
// (a batch soaking, or the next not started yet), or the lock's final phase.
func killedAt(t *testing.T, ns string) string {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sts.Annotations[workload.LockAnnotation]; !ok {
		return "not started"
	}
	for _, p := range listPods(t, ns, "app=web") {
		if st := stateOf(t, &p); st != nil && !inplace.Judged(&p, st, time.Now()).Terminal() {
			return "pod mid-update"
		}
	}
	if strings.Contains(sts.Annotations[workload.LockAnnotation], `"phase":"Progressing"`) {
		return "between pods"
	}
	return "finished"
}

// stopAfterFirstBatch runs a rollout to image and interrupts it once a pod is updated. It
// returns the pods the rollout touched.
func stopAfterFirstBatch(t *testing.T, ns, image string) map[string]bool {
	t.Helper()
	cmd := startCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+image, "--batches", "1,50%,100%")
	waitFirstPodUpdated(t, ns)
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 130 {
		t.Fatalf("interrupted run ended with %v, want exit 130", err)
	}
	// The run stopped between two steps: finish what is in flight so the pods settle.
	touched := map[string]bool{}
	for _, p := range listPods(t, ns, "app=web") {
		if st := stateOf(t, &p); st != nil {
			touched[p.Name] = true
		}
	}
	return touched
}

// TestInterruptedRunResumesOrRollsBack stops a run with Ctrl-C after its first batch; the same
// command again finishes it, and `rollback` instead undoes it.
func TestInterruptedRunResumesOrRollsBack(t *testing.T) {
	for _, then := range []string{"run", "rollback"} {
		t.Run(then, func(t *testing.T) {
			ns := env.Namespace(t)
			orig := createStatefulSet(t, ns, "web", 4)
			before := identities(t, ns, "app=web")
			stopAfterFirstBatch(t, ns, appV2)

			args := []string{then, "-n", ns, "--target", "statefulset/web"}
			if then == "run" {
				args = append(args, "--image", "app="+appV2, "--batches", "1,50%,100%")
			}
			if r := runCLI(t, args...); r.Code != 0 {
				t.Fatalf("%s after the interruption: %s", then, r)
			}
			after := identities(t, ns, "app=web")
			if then == "run" {
				podsOnImage(t, ns, "app=web", appV2)
				checkInPlace(t, before, after, 1)
				return
			}
			checkRolledBack(t, ns, orig, before, after)
		})
	}
}

// TestTerminatedRunRollsBack: with --on-terminate rollback, as the Tekton Task runs its step, a
// SIGTERM after the first batch (Tekton deleting the pod of a cancelled TaskRun) rolls the
// rollout back before the command exits 1: the same pods on their first digests, the template
// and update strategy restored.
func TestTerminatedRunRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 4)
	before := identities(t, ns, "app=web")
	var stderr bytes.Buffer
	cmd := clitest.Start(t, env, cli, &stderr, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV2,
		"--batches", "1,50%,100%", "--soak", "1m", "--on-terminate", "rollback")
	waitFirstPodUpdated(t, ns)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Fatalf("terminated run ended with %v, want exit 1 (rolled back)\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "rolling the rollout back") {
		t.Errorf("stderr says nothing of the rollback:\n%s", stderr.String())
	}
	checkRolledBack(t, ns, orig, before, identities(t, ns, "app=web"))
}

// waitFirstPodUpdated waits until a pod of web is updated: the first batch of a rollout to
// stop or terminate.
func waitFirstPodUpdated(t *testing.T, ns string) {
	t.Helper()
	cluster.WaitFor(t, 60*time.Second, "the first batch", func(context.Context) (bool, error) {
		for _, p := range listPods(t, ns, "app=web") {
			if st := stateOf(t, &p); st != nil && inplace.Judged(&p, st, time.Now()) == inplace.StageUpdated {
				return true, nil
			}
		}
		return false, nil
	})
}

// checkRolledBack checks that a rollout of web was rolled back: the same pods (before, after)
// on their first digests, the StatefulSet reconciled on orig's template and update strategy.
func checkRolledBack(t *testing.T, ns string, orig *appsv1.StatefulSet, before, after map[string]identity) {
	t.Helper()
	for name, b := range before {
		if a := after[name]; a.uid != b.uid || a.imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s, imageID %s->%s; want the same pod on its first digest", name, b.uid, a.uid, b.imageIDs["app"], a.imageIDs["app"])
		}
	}
	sts := waitStatefulSet(t, ns, "web", "reconciled", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	if !equality.Semantic.DeepEqual(sts.Spec.Template, orig.Spec.Template) || !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		t.Errorf("template or strategy not restored: %+v %+v", sts.Spec.Template.Spec.Containers, sts.Spec.UpdateStrategy)
	}
}

func TestSupersedeWithNewImages(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 6)
	before := identities(t, ns, "app=web")
	touched := stopAfterFirstBatch(t, ns, appV2)

	if r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV3, "--batches", "1,50%,100%"); r.Code != 2 {
		t.Fatalf("a new spec without --supersede: %s; want exit 2", r)
	}
	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app="+appV3, "--batches", "1,50%,100%", "--supersede")
	if r.Code != 0 {
		t.Fatalf("superseding run: %s", r)
	}
	podsOnImage(t, ns, "app=web", appV3)
	after := identities(t, ns, "app=web")
	for name, b := range before {
		want := int32(1)
		if touched[name] {
			want = 2 // v2, then v3
		}
		if got := after[name].restarts["app"] - b.restarts["app"]; got != want {
			t.Errorf("pod %s: app restarted %d times, want %d", name, got, want)
		}
		if after[name].uid != b.uid {
			t.Errorf("pod %s recreated", name)
		}
	}
	for _, p := range listPods(t, ns, "app=web") {
		if st := stateOf(t, &p); st == nil || st.Containers[0].BeforeImage != appV1 {
			t.Errorf("pod %s: state %+v, want BeforeImage %s", p.Name, st, appV1)
		}
	}
	sts, _ := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	lock := sts.Annotations[workload.LockAnnotation]
	if sts.Spec.Template.Spec.Containers[0].Image != appV3 {
		t.Errorf("template on %s, want %s; lock %s", sts.Spec.Template.Spec.Containers[0].Image, appV3, lock)
	}
}

func TestSupersedeWithCrashRollsBackToFirstImage(t *testing.T) {
	ns := env.Namespace(t)
	orig := createStatefulSet(t, ns, "web", 6)
	before := identities(t, ns, "app=web")
	stopAfterFirstBatch(t, ns, appV2)

	r := runCLI(t, "run", "-n", ns, "--target", "statefulset/web", "--image", "app=registry.example/app:crash-3", "--batches", "1,50%,100%", "--supersede")
	if r.Code != 1 {
		t.Fatalf("superseding crash run: %s; want exit 1", r)
	}
	after := identities(t, ns, "app=web")
	for name, b := range before {
		if after[name].uid != b.uid || after[name].imageIDs["app"] != b.imageIDs["app"] {
			t.Errorf("pod %s: UID %s->%s imageID %s->%s; want the same pod back on v1's digest", name, b.uid, after[name].uid, b.imageIDs["app"], after[name].imageIDs["app"])
		}
	}
	for _, p := range listPods(t, ns, "app=web") {
		if !cluster.PodReady(&p) {
			t.Errorf("pod %s not Ready", p.Name)
		}
	}
	sts := waitStatefulSet(t, ns, "web", "restored", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision == orig.Status.UpdateRevision && s.Status.UpdatedReplicas == 6
	})
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != appV1 {
		t.Errorf("template image %s, want %s", got, appV1)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	// sick's pod declares a readiness gate nobody sets: Running, never Ready, and stable (a
	// crash-looping pod would change under the test).
	labels := map[string]string{"app": "sick"}
	sick := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "sick", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "sick",
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template(labels)},
	}
	sick.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: inplace.ReadinessGate}}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sick, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPod(t, ns, "sick-0", 30*time.Second, "Running, containers ready, not Ready", func(p *corev1.Pod) bool {
		cs := cluster.ContainerStatus(p, "app")
		return p.Status.Phase == corev1.PodRunning && cs != nil && cs.Ready && !cluster.PodReady(p)
	})
	// changed's template was edited under OnDelete: its pod still runs the old revision, an
	// unfinished rollout of more than images.
	createStatefulSet(t, ns, "changed", 1)
	if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), "changed", "application/strategic-merge-patch+json",
		[]byte(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"containers":[{"name":"app","env":[{"name":"MODE","value":"fast"}]}]}}}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatefulSet(t, ns, "changed", "a new update revision observed", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != s.Status.CurrentRevision
	})
	for _, name := range []string{"held", "busy"} {
		createStatefulSet(t, ns, name, 1)
		holder := map[string]string{"held": "argo:shop/web", "busy": "cli"}[name]
		lock := `{"holder":"` + holder + `","rolloutID":"other-1","specHash":"0000","images":{"app":"registry.example/app:v9"},"previousImages":{"app":"` + appV1 + `"},"phase":"Progressing","startedAt":"2026-01-01T00:00:00Z"}`
		patch := `{"metadata":{"annotations":{"` + workload.LockAnnotation + `":` + jsonString(lock) + `}}}`
		if _, err := env.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name   string
		target string
		args   []string
		want   string
	}{
		{"missing workload", "nope", []string{"--image", "app=" + appV2}, "not found"},
		{"unknown container", "web", []string{"--image", "db=" + appV2}, `/web: no container named "db" (its containers: app, sidecar)`},
		{"invalid image", "web", []string{"--image", "app=registry.example/App:V2"}, "not a valid image reference"},
		{"batches not increasing", "web", []string{"--image", "app=" + appV2, "--batches", "50%,10%,100%"}, "not strictly increasing"},
		{"batches not ending at 100%", "web", []string{"--image", "app=" + appV2, "--batches", "1,2"}, "the last batch must be 100%"},
		{"pods not ready", "sick", []string{"--image", "app=" + appV2}, "not Ready"},
		{"locked by another holder", "held", []string{"--image", "app=" + appV2}, "being rolled out by argo:shop/web"},
		{"another spec of the same holder", "busy", []string{"--image", "app=" + appV2}, "pass --supersede"},
		{"batches that shrink for the pod count", "web", []string{"--image", "app=" + appV2, "--batches", "2,10%,100%"}, "with 2 pods, batch 10% resolves to 1 pods, fewer than the 2"},
		{"template changed beyond images", "changed", []string{"--image", "app=" + appV2}, "unfinished rollout"},
		{"unknown kind", "web", []string{"--image", "app=" + appV2, "--target", "frobs/web"}, "unknown workload kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := resourceVersions(t, ns)
			args := append([]string{"run", "-n", ns, "--target", "statefulset/" + tt.target}, tt.args...)
			r := runCLI(t, args...)
			if r.Code != 2 || !contains(r.Stderr, tt.want) {
				t.Fatalf("%s\nwant exit 2 and %q", r, tt.want)
			}
			if after := resourceVersions(t, ns); !equalMaps(before, after) {
				t.Errorf("objects changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// resourceVersions of every StatefulSet and pod in the namespace.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sets, err := env.Client.AppsV1().StatefulSets(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets.Items {
		out["sts/"+s.Name] = s.ResourceVersion
	}
	for _, p := range listPods(t, ns, "") {
		out["pod/"+p.Name] = p.ResourceVersion
	}
	return out
}
