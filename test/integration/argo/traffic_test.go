package argo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// trafficPlugin is the traffic router's name in argo-rollouts-config.
const trafficPlugin = "inplace-rollout/traffic"

// trafficReplicas is the size of the traffic router's StatefulSet target: 20% of it is 2 pods,
// 50% is 5.
const trafficReplicas = 10

// weightSteps are the traffic tests' steps: setWeight 20, pause, setWeight 50, pause.
var weightSteps = []rolloutsv1alpha1.CanaryStep{
	{SetWeight: ptr.To[int32](20)},
	{Pause: &rolloutsv1alpha1.RolloutPause{}},
	{SetWeight: ptr.To[int32](50)},
	{Pause: &rolloutsv1alpha1.RolloutPause{}},
}

// createTrafficRollout creates a Rollout of replicas whose traffic router rolls the StatefulSet
// target in place through steps, and waits until Argo counts its first revision Healthy. Its
// sentinel (plugin/traffic's package doc) is a pod of its own template, labelled so that the
// target's selector does not match it.
func createTrafficRollout(t *testing.T, ns, name, target, image string, replicas int32, steps []rolloutsv1alpha1.CanaryStep) {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{
		"target":      map[string]any{"kind": "StatefulSet", "name": target},
		"gracePeriod": "1s",
		"soak":        "1s",
		"timeout":     "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"rollout": name}
	tmpl := clitest.Template(labels)
	tmpl.Spec.Containers[0].Image = image
	ro := &rolloutsv1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: rolloutsv1alpha1.RolloutSpec{
			Replicas:                ptr.To(replicas),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			Template:                tmpl,
			ProgressDeadlineSeconds: ptr.To[int32](300),
			Strategy: rolloutsv1alpha1.RolloutStrategy{Canary: &rolloutsv1alpha1.CanaryStrategy{
				TrafficRouting: &rolloutsv1alpha1.RolloutTrafficRouting{Plugins: map[string]json.RawMessage{trafficPlugin: cfg}},
				Steps:          steps,
			}},
		},
	}
	if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Create(context.Background(), ro, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Rollout %s/%s: %v", ns, name, err)
	}
	waitRollout(t, ns, name, time.Minute, "its first revision Healthy", func(ro *rolloutsv1alpha1.Rollout) bool {
		return ro.Status.Phase == rolloutsv1alpha1.RolloutPhaseHealthy && ro.Status.StableRS != "" && ro.Status.StableRS == ro.Status.CurrentPodHash
	})
}

// pausedAt reports whether the Rollout, on a revision other than oldHash, is paused at step
// index.
func pausedAt(oldHash string, index int32) func(*rolloutsv1alpha1.Rollout) bool {
	return func(ro *rolloutsv1alpha1.Rollout) bool {
		return onNewRevision(ro, oldHash) && ro.Status.Phase == rolloutsv1alpha1.RolloutPhasePaused &&
			ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == index
	}
}

// readyOn reports whether the pod's app container is on image, in its spec and its status,
// Running, and the pod Ready.
func readyOn(p *corev1.Pod, image string) bool {
	cs := cluster.ContainerStatus(p, "app")
	return p.Spec.Containers[0].Image == image && cs != nil && cs.Image == image && cs.State.Running != nil && cluster.PodReady(p)
}

// podsAt is how many of the target's pods a weight puts on the new images.
func podsAt(weight int32) int {
	return int(math.Ceil(float64(weight) * trafficReplicas / 100))
}

// podsPast is how many of the target's pods must be Ready on the new images once the Rollout
// stands at step index idx: those of the highest setWeight step before it.
func podsPast(steps []rolloutsv1alpha1.CanaryStep, idx int32) int {
	n := 0
	for i := range min(int(idx), len(steps)) {
		if w := steps[i].SetWeight; w != nil {
			n = max(n, podsAt(*w))
		}
	}
	return n
}

// gateWatch polls a traffic Rollout and its target while the Rollout goes through its setWeight
// steps, and records every time the Rollout stood past a setWeight step with fewer of the
// target's pods Ready on the new image than the step's weight asks.
type gateWatch struct {
	stop func()

	mu sync.Mutex
	// samples counts the polls that saw the new revision; gating those at a setWeight step
	// that saw fewer pods Ready than its weight asks, the step being held.
	samples, gating int
	violations      []string
}

// watchGate starts a gateWatch. The Rollout is read before the pods: the count of pods Ready on
// the new image only grows while the Rollout moves forward, so a count read after the Rollout
// that is below its step's weight was below it when the Rollout was read too.
func watchGate(t *testing.T, ns, name, target, image, oldHash string, steps []rolloutsv1alpha1.CanaryStep) *gateWatch {
	t.Helper()
	w := &gateWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ros := argoClient(t).ArgoprojV1alpha1().Rollouts(ns)
	// A client of its own, so that its polls do not wait on the shared client's rate limit.
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("building a Kubernetes client: %v", err)
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ro, err := ros.Get(ctx, name, metav1.GetOptions{})
			if err == nil && onNewRevision(ro, oldHash) && !ro.Status.Abort {
				pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + target})
				if err == nil {
					n := 0
					for i := range pods.Items {
						if readyOn(&pods.Items[i], image) {
							n++
						}
					}
					idx := int32(0)
					if ro.Status.CurrentStepIndex != nil {
						idx = *ro.Status.CurrentStepIndex
					}
					w.mu.Lock()
					w.samples++
					if int(idx) < len(steps) && steps[idx].SetWeight != nil && n < podsAt(*steps[idx].SetWeight) {
						w.gating++
					}
					if n < podsPast(steps, idx) {
						w.violations = append(w.violations, fmt.Sprintf("step index %d with %d of %d pods Ready on %s", idx, n, len(pods.Items), image))
					}
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(w.stop)
	return w
}

// check stops the watch and fails the test on any step passed before its pods were Ready.
func (w *gateWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Errorf("the Rollout moved past a setWeight step before its pods were Ready: %s", v)
	}
	t.Logf("gate watch: %d polls of the new revision, %d of them held at a setWeight step before its pods were Ready", w.samples, w.gating)
}

// currentHash is the Rollout's current pod hash, the revision the next template change leaves.
func currentHash(t *testing.T, ns, name string) string {
	t.Helper()
	ro, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Rollout %s/%s: %v", ns, name, err)
	}
	return ro.Status.CurrentPodHash
}

// throughPauses changes the Rollout's app image to AppV2 with kubectl argo rollouts set image
// and goes through its steps up to the last pause, promoting at each pause but that one. At
// each pause the target has the pods of the setWeight steps before it on AppV2, and none more;
// no step was passed before its pods were Ready. It returns the revision left.
func throughPauses(t *testing.T, ns, name, target string, steps []rolloutsv1alpha1.CanaryStep) (oldHash string) {
	t.Helper()
	oldHash = currentHash(t, ns, name)
	gate := watchGate(t, ns, name, target, clitest.AppV2, oldHash, steps)
	argoRollouts(t, "set", "image", name, "app="+clitest.AppV2, "-n", ns)
	var pauses []int32
	for i, s := range steps {
		if s.Pause != nil {
			pauses = append(pauses, int32(i))
		}
	}
	for i, idx := range pauses {
		if i > 0 {
			argoRollouts(t, "promote", name, "-n", ns)
		}
		want := podsPast(steps, idx)
		waitRollout(t, ns, name, 3*time.Minute, fmt.Sprintf("paused at step %d", idx), pausedAt(oldHash, idx))
		if n, _ := podsOn(t, ns, target, clitest.AppV2); n != want {
			t.Errorf("%d of %d pods Ready on %s at the pause of step %d, want %d", n, trafficReplicas, clitest.AppV2, idx, want)
		}
		if n := specImages(t, ns, target, clitest.AppV2); n != want {
			t.Errorf("%d pods' specs on %s at the pause of step %d, want %d", n, clitest.AppV2, idx, want)
		}
	}
	gate.check(t)
	return oldHash
}

// TestTrafficWeightsThenAbort: setWeight 20 and 50 move 2 and then 5 of a 10-pod StatefulSet to
// the new image in place, each step held until its pods are Ready; kubectl argo rollouts abort
// at 50% puts every pod back on its old image and the Rollout is Degraded.
func TestTrafficWeightsThenAbort(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "cache", trafficReplicas)
	before := podStates(t, ns, "cache")
	createTrafficRollout(t, ns, "cache", "cache", clitest.AppV1, 1, weightSteps)

	began := time.Now()
	old := throughPauses(t, ns, "cache", "cache", weightSteps)
	t.Logf("set image to the pause after setWeight 50: %s", time.Since(began).Round(100*time.Millisecond))

	began = time.Now()
	argoRollouts(t, "abort", "cache", "-n", ns)
	abortedOn(t, ns, "cache", old)
	waitRolledBack(t, ns, "cache", before, 2*time.Minute)
	if n := specImages(t, ns, "cache", clitest.AppV2); n != 0 {
		t.Errorf("%d pods' specs still on %s after the abort", n, clitest.AppV2)
	}
	t.Logf("abort to every pod back on its image: %s", time.Since(began).Round(100*time.Millisecond))
}

// TestTrafficFullPromotion: after the setWeight steps, promote goes on to full promotion: every
// pod of the 10 runs the new image with its UID unchanged, the StatefulSet counts them updated on
// one revision, the Rollout is Healthy, and later reconciles of the Healthy Rollout change no
// pod.
func TestTrafficFullPromotion(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "cache", trafficReplicas)
	_, uids := podsOn(t, ns, "cache", clitest.AppV1)
	createTrafficRollout(t, ns, "cache", "cache", clitest.AppV1, 1, weightSteps)

	began := time.Now()
	old := throughPauses(t, ns, "cache", "cache", weightSteps)
	promoteFully(t, ns, "cache", "cache", old, uids)
	t.Logf("set image to Healthy, two promotes: %s", time.Since(began).Round(100*time.Millisecond))
}

// TestTrafficSentinelByCanaryScale: the other sentinel of plugin/traffic's package doc,
// spec.replicas 0 with setCanaryScale {replicas: 1}, and the steps ending in setWeight 100 as the
// doc says: the weights hold 2 and 5 pods as with a replica of its own, and the Rollout is Healthy
// only once every pod runs the new image (without the last step Argo promotes it at 5 of 10).
func TestTrafficSentinelByCanaryScale(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	clitest.CreateStatefulSet(t, env, ns, "cache", trafficReplicas)
	_, uids := podsOn(t, ns, "cache", clitest.AppV1)
	steps := []rolloutsv1alpha1.CanaryStep{{SetCanaryScale: &rolloutsv1alpha1.SetCanaryScale{Replicas: ptr.To[int32](1)}}}
	steps = append(steps, weightSteps...)
	steps = append(steps, rolloutsv1alpha1.CanaryStep{SetWeight: ptr.To[int32](100)})
	createTrafficRollout(t, ns, "cache", "cache", clitest.AppV1, 0, steps)

	began := time.Now()
	old := throughPauses(t, ns, "cache", "cache", steps)
	promoteFully(t, ns, "cache", "cache", old, uids)
	t.Logf("set image to Healthy, two promotes: %s", time.Since(began).Round(100*time.Millisecond))
}

// promoteFully promotes the Rollout, paused at its last pause, and checks full promotion: once
// the Rollout is Healthy every pod of the target runs AppV2 with its UID in uids, the
// StatefulSet counts them updated on one revision, and later reconciles of the Healthy Rollout
// change no pod.
func promoteFully(t *testing.T, ns, name, target, oldHash string, uids map[string]string) {
	t.Helper()
	argoRollouts(t, "promote", name, "-n", ns)
	healthyOn(t, ns, name, oldHash)
	n, after := podsOn(t, ns, target, clitest.AppV2)
	if n != trafficReplicas {
		t.Errorf("%d of %d pods Ready on %s once Healthy", n, trafficReplicas, clitest.AppV2)
	}
	if !maps.Equal(uids, after) {
		t.Errorf("pods were recreated: UIDs before %v, after %v", uids, after)
	}
	clitest.WaitStatefulSet(t, env, ns, target, "every replica counted updated on one revision", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == trafficReplicas &&
			s.Status.CurrentRevision == s.Status.UpdateRevision && s.Spec.Template.Spec.Containers[0].Image == clitest.AppV2
	})

	// The Healthy Rollout's reconciles go on calling the router (UpdateHash, SetWeight and
	// VerifyWeight on every one): they must change no pod.
	settled := podRestarts(t, ns, target)
	for i := range 3 {
		nudgeReconcile(t, ns, name, i)
	}
	if now := podRestarts(t, ns, target); !maps.Equal(settled, now) {
		t.Errorf("pods changed on the Healthy Rollout's reconciles: before %v, after %v", settled, now)
	}
}

// podRestarts is every pod of the target by name: its UID, app image and the restart count of
// each container.
func podRestarts(t *testing.T, ns, target string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range clitest.ListPods(t, env, ns, "app="+target) {
		s := fmt.Sprintf("uid=%s image=%s", p.UID, p.Spec.Containers[0].Image)
		for _, cs := range p.Status.ContainerStatuses {
			s += fmt.Sprintf(" %s:%d", cs.Name, cs.RestartCount)
		}
		out[p.Name] = s
	}
	return out
}

// nudgeReconcile writes an annotation on the Rollout, which Argo reconciles, and waits until
// the controller's log shows one more reconcile of it completed.
func nudgeReconcile(t *testing.T, ns, name string, i int) {
	t.Helper()
	before := reconciles(t, ns, name)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.inplace-rollout.io/nudge":"%d"}}}`, i)
	if _, err := argoClient(t).ArgoprojV1alpha1().Rollouts(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating Rollout %s/%s: %v", ns, name, err)
	}
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("a reconcile of Rollout %s/%s after annotation %d", ns, name, i), func(context.Context) (bool, error) {
		return reconciles(t, ns, name) > before, nil
	})
}

// reconciles counts the completed reconciles of the Rollout in the controller's log.
func reconciles(t *testing.T, ns, name string) int {
	t.Helper()
	data, err := os.ReadFile(env.Argo.LogPath)
	if err != nil {
		t.Fatalf("reading the controller's log: %v", err)
	}
	n := 0
	for line := range bytes.Lines(data) {
		if bytes.Contains(line, []byte(`msg="Reconciliation completed"`)) && bytes.Contains(line, []byte(" namespace="+ns+" ")) &&
			bytes.Contains(line, []byte(" rollout="+name+" ")) {
			n++
		}
	}
	return n
}
