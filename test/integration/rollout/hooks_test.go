package rollout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

const (
	deregistered corev1.PodConditionType = "example.com/deregistered"
	registered   corev1.PodConditionType = "example.com/registered"
)

// hooksFile writes an InPlaceRollout of StatefulSet web to appV2 with hooks (the field as YAML)
// and returns its path.
func hooksFile(t *testing.T, hooks string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rollout.yaml")
	doc := fmt.Sprintf("apiVersion: inplace-rollout.io/v1alpha1\nkind: InPlaceRollout\nspec:\n  target: {kind: StatefulSet, name: web}\n  images: {app: %q}\n  batches: [1, \"100%%\"]\n  gracePeriod: 1s\n  hooks: %s\n", appV2, hooks)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// createGated creates StatefulSet web of gated pods, opens each pod's gate as the gate
// controller would, and waits until every replica is Ready.
func createGated(t *testing.T, ns string, replicas int32) {
	t.Helper()
	createGatedStatefulSet(t, ns, "web", replicas, appsv1.ParallelPodManagement)
	gateTrue := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True"}]}}`, inplace.ReadinessGate)
	for i := range replicas {
		name := fmt.Sprintf("web-%d", i)
		env.WaitForPod(t, ns, name, 30*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(gateTrue), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		env.WaitForPod(t, ns, name, 30*time.Second, "Ready", cluster.PodReady)
	}
}

// milestone is what a pod's update went through, in the order the pod watch saw it.
type milestone string

const (
	preAsked   milestone = "preUpdate handshake asked"
	drained    milestone = "drained"
	patched    milestone = "image patched"
	readyOnNew milestone = "Ready on the new image"
	postAsked  milestone = "postUpdate handshake asked"
	counted    milestone = "counted as updated"
)

// registry plays a service registry's controller: it watches the namespace's pods, and when
// the engine sets one of its conditions False, records who asked (the condition's reason:
// PreUpdate, PostUpdate, RollbackPreUpdate, RollbackPostUpdate) and, if it releases that
// condition, sets it True. It also records, per pod, the first event of each milestone.
type registry struct {
	release map[corev1.PodConditionType]bool

	mu      sync.Mutex
	asked   map[string][]string // pod -> reasons, one per False the engine wrote
	seen    map[string]map[milestone]int
	events  int
	isFalse map[string]bool // pod/condition currently False, so that one ask counts once
}

func startRegistry(t *testing.T, ns string, release ...corev1.PodConditionType) *registry {
	t.Helper()
	r := &registry{release: map[corev1.PodConditionType]bool{}, asked: map[string][]string{}, seen: map[string]map[milestone]int{}, isFalse: map[string]bool{}}
	for _, c := range release {
		r.release[c] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				r.observe(ctx, t, p)
			}
		}
	}()
	return r
}

func (r *registry) observe(ctx context.Context, t *testing.T, p *corev1.Pod) {
	r.mu.Lock()
	r.events++
	at := r.events
	if r.seen[p.Name] == nil {
		r.seen[p.Name] = map[milestone]int{}
	}
	first := func(m milestone, now bool) {
		if _, ok := r.seen[p.Name][m]; now && !ok {
			r.seen[p.Name][m] = at
		}
	}
	st, _ := inplace.ReadState(p)
	var release []corev1.PodConditionType
	for _, c := range p.Status.Conditions {
		if c.Type != deregistered && c.Type != registered {
			continue
		}
		key := p.Name + "/" + string(c.Type)
		if c.Status == corev1.ConditionFalse && !r.isFalse[key] {
			r.asked[p.Name] = append(r.asked[p.Name], c.Reason)
			first(preAsked, c.Reason == "PreUpdate")
			first(postAsked, c.Reason == "PostUpdate")
			if r.release[c.Type] {
				release = append(release, c.Type)
			}
		}
		r.isFalse[key] = c.Status == corev1.ConditionFalse
	}
	gate := false
	for _, c := range p.Status.Conditions {
		gate = gate || c.Type == inplace.ReadinessGate && c.Status == corev1.ConditionFalse
	}
	first(drained, gate)
	first(patched, p.Spec.Containers[0].Image == appV2)
	first(readyOnNew, cluster.PodReady(p) && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Image == appV2)
	first(counted, st != nil && st.Stage == inplace.StageUpdated)
	r.mu.Unlock()
	for _, c := range release {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"Registered"}]}}`, c)
		if _, err := env.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil && ctx.Err() == nil {
			t.Errorf("registry: releasing %s of pod %s: %v", c, p.Name, err)
		}
	}
}

func (r *registry) askedOf(pod string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked[pod])
}

func (r *registry) order(pod string) map[milestone]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[milestone]int{}
	for k, v := range r.seen[pod] {
		out[k] = v
	}
	return out
}

const bothHandshakes = "{preUpdate: {handshake: {condition: example.com/deregistered}}, postUpdate: {handshake: {condition: example.com/registered}, timeout: 1m}}"

// TestHandshakeHooksRunInOrder: a registry's controller releases both handshakes; every pod goes
// through preUpdate, the drain, the image patch, Ready on the new image, postUpdate, then counts
// as updated, in that order, each hook once, and keeps its UID.
func TestHandshakeHooksRunInOrder(t *testing.T) {
	ns := env.Namespace(t)
	createGated(t, ns, 3)
	before := identities(t, ns, "app=web")
	reg := startRegistry(t, ns, deregistered, registered)
	start := time.Now()
	if r := runCLI(t, "run", "-n", ns, "-f", hooksFile(t, bothHandshakes)); r.Code != 0 {
		t.Fatalf("run: %s", r)
	}
	t.Logf("3 pods through both handshakes in %s", time.Since(start).Round(time.Millisecond))
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	want := []milestone{preAsked, drained, patched, readyOnNew, postAsked, counted}
	for name := range before {
		if got := reg.askedOf(name); !slices.Equal(got, []string{"PreUpdate", "PostUpdate"}) {
			t.Errorf("pod %s: the registry was asked %v, want PreUpdate then PostUpdate, once each", name, got)
		}
		seen := reg.order(name)
		for i, m := range want {
			if _, ok := seen[m]; !ok {
				t.Errorf("pod %s: never seen %s (seen %v)", name, m, seen)
			} else if i > 0 && seen[m] <= seen[want[i-1]] {
				t.Errorf("pod %s: %s (event %d) not after %s (event %d)", name, m, seen[m], want[i-1], seen[want[i-1]])
			}
		}
	}
}

// TestFailingHookRollsBack: a preUpdate handshake nobody releases times out with onFailure Fail:
// the pod fails, the rollout rolls back, and the revert of that pod, whose images never changed,
// runs postUpdate, which the registry releases, then clears its state.
func TestFailingHookRollsBack(t *testing.T) {
	ns := env.Namespace(t)
	createGated(t, ns, 2)
	before := identities(t, ns, "app=web")
	reg := startRegistry(t, ns, registered)
	hooks := "{preUpdate: {handshake: {condition: example.com/deregistered}, timeout: 2s, onFailure: Fail}, postUpdate: {handshake: {condition: example.com/registered}}}"
	r := runCLI(t, "run", "-n", ns, "-f", hooksFile(t, hooks))
	if r.Code != 1 || !contains(r.Stderr, "condition example.com/deregistered not True within 2s") {
		t.Fatalf("run: %s; want exit 1 naming the hook that timed out", r)
	}
	checkInPlace(t, before, identities(t, ns, "app=web"), 0)
	podsOnImage(t, ns, "app=web", appV1)
	if got := reg.askedOf("web-1"); !slices.Equal(got, []string{"PreUpdate", "RollbackPostUpdate"}) {
		t.Errorf("pod web-1: the registry was asked %v, want PreUpdate, then RollbackPostUpdate", got)
	}
	if got := reg.askedOf("web-0"); len(got) != 0 {
		t.Errorf("pod web-0, of the next batch: the registry was asked %v, want nothing", got)
	}
	for _, p := range listPods(t, ns, "app=web") {
		if st := stateOf(t, &p); st != nil {
			t.Errorf("pod %s keeps state %+v", p.Name, st)
		}
	}
}

// TestKilledHookRolloutResumes: a rollout with both handshakes killed with SIGKILL at random
// moments, then run again to its end: every pod updated in place, and the registry asked once
// per hook and pod, however the kills fell.
func TestKilledHookRolloutResumes(t *testing.T) {
	ns := env.Namespace(t)
	createGated(t, ns, 4)
	before := identities(t, ns, "app=web")
	reg := startRegistry(t, ns, deregistered, registered)
	args := []string{"run", "-n", ns, "-f", hooksFile(t, bothHandshakes), "--batches", "2,100%", "--max-unavailable", "2"}

	killed := killRuns(t, ns, args, 10, rand.New(rand.NewPCG(7, 11)), 300*time.Millisecond, nil)
	if killed == 0 {
		t.Fatal("no run was killed mid-way: the test exercised nothing")
	}
	if r := runCLI(t, args...); r.Code != 0 {
		t.Fatalf("final run: %s", r)
	}
	t.Logf("%d of 10 runs killed before they finished", killed)
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
	podsOnImage(t, ns, "app=web", appV2)
	for name := range before {
		if got := reg.askedOf(name); !slices.Equal(got, []string{"PreUpdate", "PostUpdate"}) {
			t.Errorf("pod %s: the registry was asked %v, want PreUpdate then PostUpdate, once each", name, got)
		}
	}
}
