package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/inplace-rollout/inplace-rollout/config/argocd"
	"github.com/inplace-rollout/inplace-rollout/controller/inplacerollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/metrics"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

// TestApplyRollsStatefulSetInPlace: `kubectl apply` of an InPlaceRollout rolls a StatefulSet in
// place and `kubectl wait --for=condition=Succeeded` returns once every pod runs the new image,
// same pods; the status says so, Argo CD's health check and kstatus judge it healthy, `kubectl
// get` shows the printer columns, `kubectl describe` of the StatefulSet the milestone Events, the
// finalizer is gone and the webhook heard of it once. A new spec applied afterwards rolls out
// too, and `kubectl wait` waits for the new generation's condition.
func TestApplyRollsStatefulSetInPlace(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")

	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, "100%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV2); err != nil {
		t.Fatalf("after kubectl wait returned: %v", err)
	}
	checkSamePods(t, ns, "web", before, false)
	u, obj := waitRollout(t, ns, "web", "finalizer removed", func(o *v1alpha1.InPlaceRollout) bool { return !slices.Contains(o.Finalizers, inplacerollout.Finalizer) })
	s := obj.Status
	if s.Phase != "Succeeded" || s.Updated != 3 || s.Total != 3 || s.Batches != 2 || s.ObservedGeneration != obj.Generation || s.RolloutID == "" {
		t.Errorf("status %+v, want Succeeded, 3 of 3 updated in 2 batches, generation %d", s, obj.Generation)
	}
	if health, msg, err := argocd.Health(u.Object); err != nil || health != "Healthy" {
		t.Errorf("Argo CD health of the real status: %q (%q, %v), want Healthy", health, msg, err)
	}
	if res, err := kstatus.Compute(u); err != nil || res.Status != kstatus.CurrentStatus {
		t.Errorf("kstatus of the real status: %v (%v), want Current", res, err)
	}

	out := mustKubectl(t, "", "get", "inplacerollouts", "-n", ns)
	header, row, _ := strings.Cut(out, "\n")
	for _, col := range []string{"KIND", "TARGET", "PHASE", "BATCH", "BATCHES", "UPDATED", "TOTAL", "VERDICT", "AGE"} {
		if !strings.Contains(header, col) {
			t.Errorf("kubectl get inplacerollouts: no column %s in %q", col, header)
		}
	}
	if f := strings.Fields(row); len(f) < 8 || f[0] != "web" || f[3] != "Succeeded" || f[5] != "2" || f[6] != "3" {
		t.Errorf("kubectl get inplacerollouts: row %q, want web ... Succeeded 2 2 3 3", row)
	}
	describe := mustKubectl(t, "", "describe", "statefulset", "web", "-n", ns)
	for _, ev := range []string{rollout.EventRolloutStarted, rollout.EventBatchUpdating, rollout.EventRolloutSucceeded} {
		if !strings.Contains(describe, ev) {
			t.Errorf("kubectl describe statefulset web lists no %s Event", ev)
		}
	}
	hook.waitKinds(t, ns, "succeeded")
	want := fmt.Sprintf(`%s{namespace=%q,workload="StatefulSet/web"} 3`, metrics.PodsUpdated, ns)
	if m := scrape(t, controller.HealthURL+"/metrics"); !strings.Contains(m, want) {
		t.Errorf("the controller's /metrics has no line %q", want)
	}

	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV3, `[1, "100%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV3); err != nil {
		t.Fatalf("after kubectl wait for the second spec returned: %v", err)
	}
	checkSamePods(t, ns, "web", before, false)
	hook.waitKinds(t, ns, "succeeded", "succeeded")
}

// TestEditMidRolloutSupersedes: a new spec applied while the rollout is in flight replaces it:
// every pod ends on the new spec's image, none recreated.
func TestEditMidRolloutSupersedes(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 4)
	before := recordPods(t, ns, "web")
	// Long enough that the first spec cannot end before the second is applied.
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, 2, "100%"]`, "soak: 30s"))
	waitRollout(t, ns, "web", "a pod updated", func(o *v1alpha1.InPlaceRollout) bool {
		return current(o) && o.Status.Updated >= 1 && o.Status.Phase != "Succeeded"
	})
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV3, `[1, 2, "100%"]`, "soak: 1s"))
	_, obj := waitRollout(t, ns, "web", "the new spec succeeded", func(o *v1alpha1.InPlaceRollout) bool { return current(o) && o.Status.Phase == "Succeeded" })
	if obj.Generation != 2 || obj.Status.Updated != 4 {
		t.Errorf("generation %d, status %+v; want generation 2 with 4 pods updated", obj.Generation, obj.Status)
	}
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV3); err != nil {
		t.Error(err)
	}
	checkSamePods(t, ns, "web", before, false)
}

// TestCrashImageRollsBack: a rollout to an image that crashes ends RolledBack, every pod back on
// the image it ran before, by digest, same pods; Argo CD sees it Degraded and kstatus Failed;
// `kubectl wait --for=condition=Succeeded=False` returns; the webhook heard of it once.
func TestCrashImageRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")
	applyRollout(t, ns, "web", statefulSetSpec("registry.example/app:crash", `[1, "100%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Succeeded=False", "inplacerollout/web", "-n", ns, "--timeout=3m")
	u, obj := waitRollout(t, ns, "web", "finalizer removed", func(o *v1alpha1.InPlaceRollout) bool { return !slices.Contains(o.Finalizers, inplacerollout.Finalizer) })
	if obj.Status.Phase != "RolledBack" || obj.Status.Reason != string(rollout.ReasonPodFailed) || !meta.IsStatusConditionTrue(obj.Status.Conditions, inplacerollout.CondRolledBack) {
		t.Errorf("status %+v, want RolledBack (PodFailed) with condition RolledBack True", obj.Status)
	}
	checkSamePods(t, ns, "web", before, true)
	checkTemplate(t, ns, "web", clitest.AppV1)
	if health, msg, err := argocd.Health(u.Object); err != nil || health != "Degraded" {
		t.Errorf("Argo CD health of the real status: %q (%q, %v), want Degraded", health, msg, err)
	}
	if res, err := kstatus.Compute(u); err != nil || res.Status != kstatus.FailedStatus {
		t.Errorf("kstatus of the real status: %v (%v), want Failed", res, err)
	}
	hook.waitKinds(t, ns, "rolledBack")
}

// TestDeleteMidRolloutRollsBackFirst: an object deleted while its rollout is in flight (Argo CD
// judging it Progressing) stays until its rollout is rolled back, then goes; every pod is back
// on the image it ran before, by digest, and the template on the old image.
func TestDeleteMidRolloutRollsBackFirst(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, "100%"]`, "soak: 10m"))
	u, _ := waitRollout(t, ns, "web", "the first batch updated, soaking", func(o *v1alpha1.InPlaceRollout) bool { return current(o) && o.Status.Updated == 1 })
	if health, msg, err := argocd.Health(u.Object); err != nil || health != "Progressing" {
		t.Errorf("Argo CD health mid-rollout: %q (%q, %v), want Progressing", health, msg, err)
	}
	mustKubectl(t, "", "delete", "inplacerollout/web", "-n", ns, "--wait=false")
	waitGone(t, ns, "web")
	checkSamePods(t, ns, "web", before, true)
	checkTemplate(t, ns, "web", clitest.AppV1)
	hook.waitKinds(t, ns, "rolledBack")
}

// TestAbortAnnotation: the abort annotation rolls the rollout in flight back; while it stays, a
// new spec starts nothing; removed, the next spec rolls out.
func TestAbortAnnotation(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, "100%"]`, "soak: 10m"))
	waitRollout(t, ns, "web", "the first batch updated, soaking", func(o *v1alpha1.InPlaceRollout) bool { return current(o) && o.Status.Updated == 1 })
	mustKubectl(t, "", "annotate", "inplacerollout/web", "-n", ns, v1alpha1.AbortAnnotation+"=true")
	mustKubectl(t, "", "wait", "--for=condition=RolledBack", "inplacerollout/web", "-n", ns, "--timeout=3m")
	_, obj := waitRollout(t, ns, "web", "status read", func(*v1alpha1.InPlaceRollout) bool { return true })
	if obj.Status.Reason != string(rollout.ReasonRollbackRequested) {
		t.Errorf("status %+v, want reason %s", obj.Status, rollout.ReasonRollbackRequested)
	}
	checkSamePods(t, ns, "web", before, true)

	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV3, `[1, "100%"]`), v1alpha1.AbortAnnotation+"=true")
	_, obj = waitRollout(t, ns, "web", "the new spec seen", current)
	if obj.Status.Phase != "RolledBack" || !strings.Contains(obj.Status.Message, "not started") {
		t.Errorf("status %+v of a new spec while aborted, want RolledBack, not started", obj.Status)
	}
	checkSamePods(t, ns, "web", before, true)

	mustKubectl(t, "", "annotate", "inplacerollout/web", "-n", ns, v1alpha1.AbortAnnotation+"-")
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV3, `[1, 2, "100%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV3); err != nil {
		t.Error(err)
	}
	checkSamePods(t, ns, "web", before, false)
}

// TestInvalidSpecChangesNothing: a spec the engine refuses is said in the status, naming the
// field, with reason InvalidSpec; nothing is changed and the object is not held. The API server
// refuses an edit of spec.target (the CRD's validation rule).
func TestInvalidSpecChangesNothing(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	before := recordPods(t, ns, "web")
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `["50%", "10%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Stalled", "inplacerollout/web", "-n", ns, "--timeout=1m")
	_, obj := waitRollout(t, ns, "web", "status read", func(*v1alpha1.InPlaceRollout) bool { return true })
	if obj.Status.Phase != "Failed" || obj.Status.Reason != inplacerollout.ReasonInvalidSpec || !strings.Contains(obj.Status.Message, "batches") ||
		!strings.Contains(obj.Status.Message, "nothing was changed") || len(obj.Finalizers) != 0 {
		t.Errorf("object %+v, status %+v: want Failed, InvalidSpec naming batches, nothing changed, no finalizer", obj.ObjectMeta, obj.Status)
	}
	checkSamePods(t, ns, "web", before, true)
	checkTemplate(t, ns, "web", clitest.AppV1)

	doc := fmt.Sprintf("apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nmetadata:\n  name: web\n  namespace: %s\nspec:\n"+
		"  target: {kind: StatefulSet, name: other}\n  images: {app: %q}", ns, clitest.AppV2)
	if out, errOut, code := kubectl(t, doc, "apply", "-f", "-"); code == 0 || !strings.Contains(errOut, "spec.target cannot change") {
		t.Errorf("kubectl apply of another target: exit %d\n%s%s\nwant it refused, naming spec.target", code, out, errOut)
	}
}

// TestTemplateIsLeftAlone: an object annotated as a template for Tekton CustomRuns gets no
// status and no finalizer, while an object queued after it rolls out.
func TestTemplateIsLeftAlone(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 2)
	applyRollout(t, ns, "tmpl", statefulSetSpec(clitest.AppV3, `["100%"]`), v1alpha1.TemplateAnnotation+"=true")
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `["100%"]`))
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	_, tmpl := waitRollout(t, ns, "tmpl", "read", func(*v1alpha1.InPlaceRollout) bool { return true })
	if tmpl.Status.Phase != "" || len(tmpl.Status.Conditions) != 0 || len(tmpl.Finalizers) != 0 {
		t.Errorf("the template got status %+v, finalizers %v; want none", tmpl.Status, tmpl.Finalizers)
	}
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV2); err != nil {
		t.Error(err)
	}
}

// TestControllerKilledMidRolloutFinishes: the controller SIGKILLed in the middle of a rollout
// and started again finishes it, same pods, and the webhook hears of its success once.
func TestControllerKilledMidRolloutFinishes(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 4)
	before := recordPods(t, ns, "web")
	// Long enough that the rollout cannot end before the controller is killed.
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, 2, "100%"]`, "soak: 5s"))
	waitRollout(t, ns, "web", "a pod updated, the rollout going on", func(o *v1alpha1.InPlaceRollout) bool {
		return current(o) && o.Status.Updated >= 1 && o.Status.Phase != "Succeeded"
	})
	if err := controller.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := controller.Restart(); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "wait", "--for=condition=Succeeded", "inplacerollout/web", "-n", ns, "--timeout=3m")
	if err := clitest.CheckRolledOut(env, ns, "web", clitest.AppV2); err != nil {
		t.Error(err)
	}
	checkSamePods(t, ns, "web", before, false)
	waitRollout(t, ns, "web", "finalizer removed", func(o *v1alpha1.InPlaceRollout) bool { return !slices.Contains(o.Finalizers, inplacerollout.Finalizer) })
	hook.waitKinds(t, ns, "succeeded")
}

// TestTemplateChangedWaitsForAPerson: someone else changing the StatefulSet's template in the
// middle of the rollout stops it (phase Failed, reason TemplateChanged, Argo CD Degraded), the
// object still held; the abort annotation then rolls it back and lets the object go.
func TestTemplateChangedWaitsForAPerson(t *testing.T) {
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "web", 3)
	applyRollout(t, ns, "web", statefulSetSpec(clitest.AppV2, `[1, "100%"]`, "soak: 10m"))
	waitRollout(t, ns, "web", "the first batch updated, soaking", func(o *v1alpha1.InPlaceRollout) bool { return current(o) && o.Status.Updated == 1 })
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, clitest.AppV3)
	mustKubectl(t, "", "patch", "statefulset/web", "-n", ns, "--type=strategic", "-p", patch)
	u, obj := waitRollout(t, ns, "web", "stopped on the template change", func(o *v1alpha1.InPlaceRollout) bool {
		return o.Status.Reason == string(rollout.ReasonTemplateChanged)
	})
	if obj.Status.Phase != "Failed" || !slices.Contains(obj.Finalizers, inplacerollout.Finalizer) || !strings.Contains(obj.Status.Message, v1alpha1.AbortAnnotation) {
		t.Errorf("object finalizers %v, status %+v: want Failed, still held, the message naming the abort annotation", obj.Finalizers, obj.Status)
	}
	if health, msg, err := argocd.Health(u.Object); err != nil || health != "Degraded" {
		t.Errorf("Argo CD health: %q (%q, %v), want Degraded", health, msg, err)
	}
	mustKubectl(t, "", "annotate", "inplacerollout/web", "-n", ns, v1alpha1.AbortAnnotation+"=true")
	mustKubectl(t, "", "wait", "--for=condition=RolledBack", "inplacerollout/web", "-n", ns, "--timeout=3m")
	waitRollout(t, ns, "web", "finalizer removed", func(o *v1alpha1.InPlaceRollout) bool { return !slices.Contains(o.Finalizers, inplacerollout.Finalizer) })
	checkTemplate(t, ns, "web", clitest.AppV3)
}
