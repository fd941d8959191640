package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
	"github.com/inplace-rollout/inplace-rollout/test/integration/kubeletsim"
)

// createPodOn creates a pod of the test template labelled app=LABEL running app image, and
// waits until it is Ready.
func createPodOn(t *testing.T, ns, name, label, image string) *corev1.Pod {
	t.Helper()
	tmpl := template(map[string]string{"app": label})
	tmpl.Spec.Containers[0].Image = image
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
	if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
}

// TestFloatingTagIsNamedNotHidden: pods on a target tag whose registry does not answer are
// refused under pinning, naming the content they run. With --pin-digests never they report
// success with nothing to do, but the report names the content they run, that a tag pushed again
// would not restart them, that a digest would, and warns when the pods run the tag as different
// content.
func TestFloatingTagIsNamedNotHidden(t *testing.T) {
	ns := env.Namespace(t)
	// The tag is the namespace's own, so re-pointing it touches no other test.
	tag := "registry.example/" + ns + ":v1"
	first := createPodOn(t, ns, "a", "float", tag)
	if err := env.Sim.Retag(tag, kubeletsim.DigestFor(ns)); err != nil {
		t.Fatal(err)
	}
	second := createPodOn(t, ns, "b", "float", tag)
	d1, d2 := inplace.DigestOf(cluster.ContainerStatus(first, "app").ImageID), inplace.DigestOf(cluster.ContainerStatus(second, "app").ImageID)
	if d1 == "" || d1 == d2 {
		t.Fatalf("pods run digests %q and %q; the test needs two", d1, d2)
	}

	// The tag's registry does not answer, so whether the pods run what it names now cannot be
	// checked: pinning (the default) refuses, naming the content they run.
	r := runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", "app=float", "--image", "app="+tag)
	if r.Code != 2 {
		t.Fatalf("run: %s; want exit 2", r)
	}
	for _, want := range []string{"pods a, b already run app=" + tag, d1 + " (1 pods)", d2 + " (1 pods)", "could not be resolved", "give the image by digest", "--pin-digests never"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("refusal lacks %q:\n%s", want, r.Stderr)
		}
	}
	// Without pinning, the tag is judged by its name: done, and the report says what that hides.
	r = runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", "app=float", "--image", "app="+tag, "--pin-digests", "never")
	out := r.Stdout + r.Stderr
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	for _, want := range []string{"already runs these images", d1 + " (1 pods)", d2 + " (1 pods)", "does not restart them", "give the image by digest",
		"Warning: the pods run different content under one tag for container app"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	for _, p := range listPods(t, ns, "app=float") {
		if st := stateOf(t, &p); st != nil {
			t.Errorf("pod %s was touched: %+v", p.Name, st)
		}
	}
}

// TestRolloutStartWarnsOfATagRunAsDifferentContent: a rollout that starts while pods run its
// target tag under different digests goes on, and warns, naming the tag and each digest with its
// pod count: on the command's stderr and in a Warning Event on a pod that runs the tag.
func TestRolloutStartWarnsOfATagRunAsDifferentContent(t *testing.T) {
	ns := env.Namespace(t)
	// The tag is the namespace's own, so re-pointing it touches no other test.
	tag := "registry.example/" + ns + ":v2"
	first := createPodOn(t, ns, "a", "float", tag)
	if err := env.Sim.Retag(tag, kubeletsim.DigestFor(ns)); err != nil {
		t.Fatal(err)
	}
	second := createPodOn(t, ns, "b", "float", tag)
	createPodOn(t, ns, "c", "float", appV1)
	d1, d2 := inplace.DigestOf(cluster.ContainerStatus(first, "app").ImageID), inplace.DigestOf(cluster.ContainerStatus(second, "app").ImageID)
	if d1 == "" || d1 == d2 {
		t.Fatalf("pods run digests %q and %q; the test needs two", d1, d2)
	}
	want := []string{"app=" + tag, d1 + " (1 pods)", d2 + " (1 pods)"}

	// Without pinning (its registry does not answer: pinning would refuse, as above), the rollout
	// goes on by the tag's name, and warns.
	r := runCLI(t, "run", "-n", ns, "--target", "pods", "--selector", "app=float", "--image", "app="+tag, "--pin-digests", "never")
	if r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	var warning string
	for _, line := range strings.Split(r.Stderr, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "different content") {
			warning = line
		}
	}
	for _, w := range want {
		if !strings.Contains(warning, w) {
			t.Errorf("stderr warning %q lacks %q:\n%s", warning, w, r.Stderr)
		}
	}

	events, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=TagContentDiffers"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("%d TagContentDiffers Events, want 1: %+v", len(events.Items), events.Items)
	}
	ev := events.Items[0]
	if ev.Type != corev1.EventTypeWarning || (ev.InvolvedObject.Name != "a" && ev.InvolvedObject.Name != "b") {
		t.Errorf("Event %s on pod %s, want a Warning on pod a or b", ev.Type, ev.InvolvedObject.Name)
	}
	for _, w := range want {
		if !strings.Contains(ev.Message, w) {
			t.Errorf("Event message %q lacks %q", ev.Message, w)
		}
	}
}

// TestPlanRefusesACorruptStateAndNamesCurrentImages: plan reads every pod's state as run does,
// and its header names what label-selected pods run now.
func TestPlanRefusesACorruptStateAndNamesCurrentImages(t *testing.T) {
	ns := env.Namespace(t)
	createPodOn(t, ns, "a", "plan", appV1)
	createPodOn(t, ns, "b", "plan", appV3)
	args := []string{"plan", "-n", ns, "--target", "pods", "--selector", "app=plan", "--image", "app=" + appV2, "--batches", "1,100%"}

	r := runCLI(t, args...)
	if r.Code != 0 {
		t.Fatalf("plan: %s", r)
	}
	header := strings.SplitN(r.Stdout, "\n", 2)[0]
	if !strings.Contains(header, appV1+" (1 pods)") || !strings.Contains(header, appV3+" (1 pods)") || !strings.Contains(header, "-> app="+appV2) {
		t.Errorf("plan header %q, want both current images, one pod each, -> the target", header)
	}

	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), "b", "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+inplace.StateAnnotation+`":"{not json"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, args...)
	if r.Code != 2 || !strings.Contains(r.Stderr, "pod "+ns+"/b") || !strings.Contains(r.Stderr, inplace.StateAnnotation) {
		t.Errorf("plan over a corrupt state: %s\nwant exit 2 naming pod b and the annotation", r)
	}
}
