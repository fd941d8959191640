package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// podBefore is what a pod was before the scenario.
type podBefore struct {
	uid      string
	image    string
	imageID  string
	restarts map[string]int32
}

// snapshot records every pod before the scenario, by name.
func snapshot(t *testing.T, ns string) map[string]podBefore {
	t.Helper()
	out := map[string]podBefore{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+name) {
		b := podBefore{uid: string(p.UID), image: p.Spec.Containers[0].Image, restarts: map[string]int32{}}
		for _, cs := range p.Status.ContainerStatuses {
			b.restarts[cs.Name] = cs.RestartCount
			if cs.Name == "app" {
				b.imageID = cs.ImageID
			}
		}
		out[p.Name] = b
	}
	if len(out) != replicas {
		t.Fatalf("%d pods before the scenario, want %d", len(out), replicas)
	}
	return out
}

// direction is where a scenario must end.
type direction struct {
	template string        // the app image of the template and every pod
	restarts int32         // app restarts per pod over the scenario
	phase    rollout.Phase // the lock's final phase
	back     bool          // the pods run their first image again
	// partial: the rollback of a rollout cut short. A pod the rollout reached (it has a state)
	// restarted twice, once each way; a pod it never reached has no state and never restarted.
	partial bool
	// recreated are the pods the test deleted, which the StatefulSet controller created again:
	// their new UID is the controller's doing, not ours. Like pods a scale-up added, they must
	// end Running and Ready on the template's image, restarted at most once (an in-place update
	// of a pod the controller created on the old template) and owned by the StatefulSet.
	recreated map[string]bool
	// replicas is the pod count at the end when the test scaled the StatefulSet; zero means as
	// many as before.
	replicas int
}

// violations checks the invariants after a scenario and names each one broken, with the pod
// and the values.
func violations(t *testing.T, ns string, orig *appsv1.StatefulSet, before map[string]podBefore, want direction) []string {
	t.Helper()
	var out []string
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading statefulset %s/%s: %v", ns, name, err)
	}
	if !equality.Semantic.DeepEqual(sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy) {
		out = append(out, fmt.Sprintf("statefulset %s: updateStrategy %+v, want it restored to %+v", name, sts.Spec.UpdateStrategy, orig.Spec.UpdateStrategy))
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != want.template {
		out = append(out, fmt.Sprintf("statefulset %s: template app image %s, want %s", name, got, want.template))
	}
	switch l := readLock(t, sts); {
	case l == nil:
		out = append(out, fmt.Sprintf("statefulset %s: no lock annotation, want one in phase %s", name, want.phase))
	case l.Active() || l.Phase != want.phase:
		out = append(out, fmt.Sprintf("statefulset %s: lock phase %s (active %v), want %s and released", name, l.Phase, l.Active(), want.phase))
	}

	pods := clitest.ListPods(t, env, ns, "app="+name)
	wantPods := len(before)
	if want.replicas != 0 {
		wantPods = want.replicas
	}
	if len(pods) != wantPods {
		out = append(out, fmt.Sprintf("%d pods after the scenario, want %d (%d before)", len(pods), wantPods, len(before)))
	}
	var newIDs []string // the app imageID of each pod, when the pods moved to a new image
	for _, p := range pods {
		b, ok := before[p.Name]
		if !ok || want.recreated[p.Name] {
			out = append(out, controllerPodViolations(&p, ok, orig, want)...)
			if app := cluster.ContainerStatus(&p, "app"); app != nil && !want.back {
				newIDs = append(newIDs, app.ImageID)
			}
			continue
		}
		if string(p.UID) != b.uid {
			out = append(out, fmt.Sprintf("pod %s: recreated, UID %s -> %s", p.Name, b.uid, p.UID))
			continue
		}
		app, side := cluster.ContainerStatus(&p, "app"), cluster.ContainerStatus(&p, "sidecar")
		if img := p.Spec.Containers[0].Image; img != want.template && (!want.back || img != pinned(want.template, b.imageID)) {
			out = append(out, fmt.Sprintf("pod %s: spec app image %s, want %s", p.Name, img, want.template))
		}
		if app == nil || app.State.Running == nil || !cluster.PodReady(&p) {
			out = append(out, fmt.Sprintf("pod %s: app status %+v, Ready %v; want Running and Ready", p.Name, app, cluster.PodReady(&p)))
			continue
		}
		if want.back {
			if app.ImageID != b.imageID {
				out = append(out, fmt.Sprintf("pod %s: app imageID %s, want %s as before the scenario", p.Name, app.ImageID, b.imageID))
			}
		} else {
			if app.ImageID == b.imageID {
				out = append(out, fmt.Sprintf("pod %s: app imageID %s, unchanged from before the scenario", p.Name, app.ImageID))
			}
			newIDs = append(newIDs, app.ImageID)
		}
		restarts := want.restarts
		if want.partial && !hasState(&p) {
			restarts = 0
		}
		if got := app.RestartCount - b.restarts["app"]; got != restarts {
			out = append(out, fmt.Sprintf("pod %s: app restarted %d times (%d -> %d), want %d", p.Name, got, b.restarts["app"], app.RestartCount, restarts))
		}
		if side == nil || side.RestartCount != b.restarts["sidecar"] {
			out = append(out, fmt.Sprintf("pod %s: sidecar status %+v, want it never restarted (%d restarts before)", p.Name, side, b.restarts["sidecar"]))
		}
		out = append(out, stateViolations(&p, b, app.ImageID, want)...)
	}
	slices.Sort(newIDs)
	if len(newIDs) > 0 && newIDs[0] != newIDs[len(newIDs)-1] {
		out = append(out, fmt.Sprintf("pods run %s on different imageIDs: %s and %s", want.template, newIDs[0], newIDs[len(newIDs)-1]))
	}
	return out
}

// controllerPodViolations checks a pod the StatefulSet controller created during the scenario,
// after the test deleted its predecessor (existed) or scaled the StatefulSet up.
func controllerPodViolations(p *corev1.Pod, existed bool, orig *appsv1.StatefulSet, want direction) []string {
	what := "added by the scale-up"
	if existed {
		what = "recreated by the StatefulSet controller"
	}
	var out []string
	if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "StatefulSet" || ref.UID != orig.UID {
		out = append(out, fmt.Sprintf("pod %s (%s): controller %+v, want StatefulSet %s (%s)", p.Name, what, ref, name, orig.UID))
	}
	if img := p.Spec.Containers[0].Image; img != want.template {
		out = append(out, fmt.Sprintf("pod %s (%s): spec app image %s, want %s", p.Name, what, img, want.template))
	}
	app, side := cluster.ContainerStatus(p, "app"), cluster.ContainerStatus(p, "sidecar")
	if app == nil || app.State.Running == nil || !cluster.PodReady(p) {
		return append(out, fmt.Sprintf("pod %s (%s): app status %+v, Ready %v; want Running and Ready", p.Name, what, app, cluster.PodReady(p)))
	}
	if app.RestartCount > 1 {
		out = append(out, fmt.Sprintf("pod %s (%s): app restarted %d times, want at most once", p.Name, what, app.RestartCount))
	}
	if side == nil || side.RestartCount != 0 {
		out = append(out, fmt.Sprintf("pod %s (%s): sidecar status %+v, want it never restarted", p.Name, what, side))
	}
	st, err := inplace.ReadState(p)
	switch {
	case err != nil:
		out = append(out, err.Error())
	case st != nil:
		// Updated in place: it ran the template's old image before.
		old := orig.Spec.Template.Spec.Containers[0].Image
		for _, c := range st.Containers {
			if c.Name == "app" && c.BeforeImage != old {
				out = append(out, fmt.Sprintf("pod %s (%s): state BeforeImage %s, want %s, the image the controller created it on", p.Name, what, c.BeforeImage, old))
			}
		}
		if app.RestartCount != 1 {
			out = append(out, fmt.Sprintf("pod %s (%s): state stage %s but app restarted %d times, want once", p.Name, what, st.Stage, app.RestartCount))
		}
	case app.RestartCount != 0:
		out = append(out, fmt.Sprintf("pod %s (%s): no state, yet app restarted %d times", p.Name, what, app.RestartCount))
	}
	return out
}

// hasState reports whether the pod carries a state annotation.
func hasState(p *corev1.Pod) bool {
	_, ok := p.Annotations[inplace.StateAnnotation]
	return ok
}

// stateViolations checks the pod's state: it records what the pod ran before the scenario, never
// overwritten by a resumed command, and its final stage.
func stateViolations(p *corev1.Pod, b podBefore, imageID string, want direction) []string {
	st, err := inplace.ReadState(p)
	if err != nil {
		return []string{err.Error()}
	}
	if st == nil {
		if want.partial {
			// The rollout never reached the pod; the spec and restart checks cover it.
			return nil
		}
		return []string{fmt.Sprintf("pod %s: no state annotation after the scenario", p.Name)}
	}
	var out []string
	wantStage := inplace.StageUpdated
	if want.back {
		wantStage = inplace.StageRolledBack
	}
	// Without a readiness gate an update's end is judged from the pod (the new container runs
	// the target's content, Ready), never written.
	if got := inplace.Judged(p, st, time.Now()); got != wantStage {
		out = append(out, fmt.Sprintf("pod %s: state stage %s, judged %s, want %s", p.Name, st.Stage, got, wantStage))
	}
	var app *inplace.ContainerState
	for i := range st.Containers {
		if st.Containers[i].Name == "app" && !st.Containers[i].Init {
			app = &st.Containers[i]
		}
	}
	if app == nil || len(st.Containers) != 1 {
		return append(out, fmt.Sprintf("pod %s: state containers %+v, want app alone", p.Name, st.Containers))
	}
	if app.BeforeImage != b.image || app.BeforeImageID != b.imageID {
		out = append(out, fmt.Sprintf("pod %s: state BeforeImage %s (%s), want %s (%s) as before the scenario", p.Name, app.BeforeImage, app.BeforeImageID, b.image, b.imageID))
	}
	if app.RestartsBefore != b.restarts["app"] {
		out = append(out, fmt.Sprintf("pod %s: state RestartsBefore %d, want %d as before the scenario", p.Name, app.RestartsBefore, b.restarts["app"]))
	}
	if !want.back && app.AfterImageID != "" && app.AfterImageID != imageID {
		out = append(out, fmt.Sprintf("pod %s: state AfterImageID %s, but the app runs %s", p.Name, app.AfterImageID, imageID))
	}
	return out
}

// pinned is image by the digest of imageID: what a rollback puts back when it cannot check
// that the tag still names the content the pod ran (no registry here to ask).
func pinned(image, imageID string) string {
	_, digest, ok := strings.Cut(imageID, "@")
	if !ok {
		return ""
	}
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	return repo + "@" + digest
}

// readLock decodes the StatefulSet's lock annotation, or returns nil when it has none.
func readLock(t *testing.T, sts *appsv1.StatefulSet) *rollout.Record {
	t.Helper()
	raw, ok := sts.Annotations[workload.LockAnnotation]
	if !ok {
		return nil
	}
	var l rollout.Record
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("statefulset %s/%s: annotation %s: %v", sts.Namespace, sts.Name, workload.LockAnnotation, err)
	}
	return &l
}

// check reports every violation of the scenario's invariants as an error of t, and returns
// how many there were.
func check(t *testing.T, ns string, orig *appsv1.StatefulSet, before map[string]podBefore, want direction) int {
	t.Helper()
	found := violations(t, ns, orig, before, want)
	for _, v := range found {
		t.Error(v)
	}
	return len(found)
}
