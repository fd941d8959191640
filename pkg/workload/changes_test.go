package workload

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

func TestNarrows(t *testing.T) {
	tests := []struct {
		sel, watched string
		want         bool
	}{
		{"app=web", "app=web", true},
		{"app=web,pod-template-hash=abc", "app=web", true},
		{"app=web", "app=web,tier=front", false},
		{"app=api", "app=web", false},
		{"app in (web)", "app=web", false},
		{"app=web", "", true},
	}
	for _, tt := range tests {
		sel, err := labels.Parse(tt.sel)
		if err != nil {
			t.Fatal(err)
		}
		watched, err := labels.Parse(tt.watched)
		if err != nil {
			t.Fatal(err)
		}
		if got := narrows(sel, watched); got != tt.want {
			t.Errorf("narrows(%q, %q) = %v, want %v", tt.sel, tt.watched, got, tt.want)
		}
	}
}

// TestPodWatchLists: once synced, the watch answers a selector within its own from its cache,
// with the cache's own pods (read-only, not copied at every call), and sends anything else to
// the API server.
func TestPodWatchLists(t *testing.T) {
	client := fake.NewClientset(runningPod("web-a", "reg/app:v1", nil, nil), runningPod("web-b", "reg/app:v1", nil, nil),
		runningPod("db-a", "reg/db:v1", map[string]string{"app": "db"}, nil))
	ctx, w := syncedWatch(t, client, labels.SelectorFromSet(labels.Set{"app": "web"}))
	client.ClearActions()
	pods, err := w.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil || len(pods) != 2 {
		t.Fatalf("ListPods = %d pods, %v; want web-a and web-b", len(pods), err)
	}
	first := map[string]*corev1.Pod{}
	for _, p := range pods {
		first[p.Name] = p
	}
	// In any order: the cache keeps its pods in a map.
	again, _ := w.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "web"}))
	for _, p := range again {
		if cached, ok, _ := w.informer.GetStore().Get(p); !ok || cached != p || first[p.Name] != p {
			t.Errorf("pod %s listed as a copy, want the cache's own", p.Name)
		}
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d API calls for pods the watch holds: %v", n, client.Actions())
	}
	db, err := w.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "db"}))
	if err != nil || len(db) != 1 || db[0].Name != "db-a" {
		t.Fatalf("ListPods of pods the watch does not hold = %v, %v; want db-a, from the API server", db, err)
	}
	if lists := countVerb(client, "list"); lists != 1 {
		t.Errorf("%d LISTs for pods the watch does not hold, want 1", lists)
	}
	select {
	case <-w.Changes():
	case <-time.After(10 * time.Second):
		t.Fatal("no change signalled for the pods the watch found")
	}
}

func countVerb(client *fake.Clientset, verb string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

// TestPodWatchAnswersWithWrittenPods: a pod this process wrote is listed as written until the
// watch brings a version as new; an older write changes nothing.
func TestPodWatchAnswersWithWrittenPods(t *testing.T) {
	pod := runningPod("web-a", "reg/app:v1", nil, nil)
	pod.ResourceVersion = "10"
	client := fake.NewClientset(pod)
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	ctx, w := syncedWatch(t, client, sel)
	listed := func() (image, rv string) {
		t.Helper()
		pods, err := w.ListPods(ctx, "ns", sel)
		if err != nil || len(pods) != 1 {
			t.Fatalf("ListPods = %d pods, %v; want web-a", len(pods), err)
		}
		return pods[0].Spec.Containers[0].Image, pods[0].ResourceVersion
	}
	with := func(image, rv string) *corev1.Pod {
		p := pod.DeepCopy()
		p.Spec.Containers[0].Image, p.ResourceVersion = image, rv
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "inplace-rollout"}}
		return p
	}

	w.Wrote(with("reg/app:v0", "9"))
	if img, rv := listed(); img != "reg/app:v1" || rv != "10" {
		t.Errorf("after an older write, listed %s at %s; want reg/app:v1 at 10, the watch's", img, rv)
	}
	w.Wrote(with("reg/app:v2", "11"))
	pods, _ := w.ListPods(ctx, "ns", sel)
	if img, rv := pods[0].Spec.Containers[0].Image, pods[0].ResourceVersion; img != "reg/app:v2" || rv != "11" || pods[0].ManagedFields != nil {
		t.Errorf("after a write the watch has not brought, listed %s at %s with managed fields %v; want reg/app:v2 at 11, without them", img, rv, pods[0].ManagedFields)
	}
	if _, err := client.CoreV1().Pods("ns").Update(ctx, with("reg/app:v3", "12"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for img, _ := listed(); img != "reg/app:v3"; img, _ = listed() {
		if time.Now().After(deadline) {
			t.Fatalf("listed %s once the watch brought a newer version; want reg/app:v3", img)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPodWatchInternsLongAnnotations: equal long annotation values of the pods the watch holds,
// and of a pod it was told of (Wrote), share one backing array, so that comparing them, as the
// cache of decoded states does at every step, ends at the pointer.
func TestPodWatchInternsLongAnnotations(t *testing.T) {
	long := func() string { return strings.Repeat(`{"stage":"Updated"}`, 8) } // a new array at each call
	a, b := runningPod("web-a", "reg/app:v1", nil, nil), runningPod("web-b", "reg/app:v1", nil, nil)
	a.Annotations = map[string]string{"state": long()}
	b.Annotations = map[string]string{"state": long()}
	if unsafe.StringData(a.Annotations["state"]) == unsafe.StringData(b.Annotations["state"]) {
		t.Fatal("the two pods' annotations share an array before the watch")
	}
	client := fake.NewClientset(a, b)
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	ctx, w := syncedWatch(t, client, sel)
	written := b.DeepCopy()
	written.ResourceVersion, written.Annotations["state"] = "2", long()
	w.Wrote(written)
	pods, err := w.ListPods(ctx, "ns", sel)
	if err != nil || len(pods) != 2 {
		t.Fatalf("ListPods = %d pods, %v; want web-a and web-b", len(pods), err)
	}
	arrays := map[*byte][]string{}
	for _, p := range pods {
		data := unsafe.StringData(p.Annotations["state"])
		arrays[data] = append(arrays[data], p.Name+"@"+p.ResourceVersion)
	}
	if len(arrays) != 1 {
		t.Errorf("the equal annotations of %d pods are in %d arrays, want one: %v", len(pods), len(arrays), arrays)
	}
}

func TestPodWatchReadsEachPodObjectsStateOnce(t *testing.T) {
	state := func(rollout string) string {
		return `{"rolloutID":"` + rollout + `","startedAt":"2026-01-01T00:00:00Z","stageAt":"2026-01-01T00:00:00Z","stage":"Updating",` +
			`"containers":[{"name":"app","beforeImage":"reg/app:v1","afterImage":"reg/app:v2"}]}`
	}
	a := runningPod("web-a", "reg/app:v2", nil, nil)
	a.Annotations = map[string]string{inplace.StateAnnotation: state("r1")}
	bad := runningPod("web-b", "reg/app:v2", nil, nil)
	bad.Annotations = map[string]string{inplace.StateAnnotation: `{"stage":"Somewhere"}`}
	client := fake.NewClientset(a, bad)
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	ctx, w := syncedWatch(t, client, sel)
	list := func() map[string]*corev1.Pod {
		t.Helper()
		pods, err := w.ListPods(ctx, "ns", sel)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*corev1.Pod{}
		for _, p := range pods {
			byName[p.Name] = p
		}
		return byName
	}
	read := func(p *corev1.Pod) *inplace.State {
		t.Helper()
		s, err := w.ReadState(p)
		if err != nil {
			t.Fatalf("ReadState(%s): %v", p.Name, err)
		}
		return s
	}

	pods := list()
	first := read(pods["web-a"])
	if first.RolloutID != "r1" {
		t.Fatalf("ReadState(web-a) = rollout %q, want r1", first.RolloutID)
	}
	if again := read(list()["web-a"]); again != first {
		t.Error("the same pod object's state was decoded again")
	}
	var se *inplace.StateError
	for range 2 {
		if _, err := w.ReadState(pods["web-b"]); !errors.As(err, &se) {
			t.Errorf("ReadState(web-b) = %v, want its StateError at every read", err)
		}
	}

	// A new version of the pod is a new object, read anew.
	next := pods["web-a"].DeepCopy()
	next.Annotations[inplace.StateAnnotation] = state("r2")
	if _, err := client.CoreV1().Pods("ns").Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var now *corev1.Pod
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if now = list()["web-a"]; now.Annotations[inplace.StateAnnotation] == state("r2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not bring web-a's update within 10s")
		}
	}
	if got := read(now); got.RolloutID != "r2" {
		t.Errorf("ReadState(web-a, updated) = rollout %q, want r2", got.RolloutID)
	}

	// A pod object changed in place, against the lister's rule, is not answered from the cache
	// with its old state.
	changed := now.DeepCopy()
	if got := read(changed); got.RolloutID != "r2" {
		t.Fatalf("ReadState(copy) = rollout %q, want r2", got.RolloutID)
	}
	changed.Annotations[inplace.StateAnnotation] = state("r3")
	if got := read(changed); got.RolloutID != "r3" {
		t.Errorf("ReadState(changed in place) = rollout %q, want r3", got.RolloutID)
	}
}

func TestPodWatchForgetsPodObjectsNoLongerHeld(t *testing.T) {
	client := fake.NewClientset()
	_, w := syncedWatch(t, client, labels.SelectorFromSet(labels.Set{"app": "web"}))
	for i := range 100 {
		p := runningPod(fmt.Sprintf("web-%d", i), "reg/app:v1", nil, nil)
		if _, err := w.ReadState(p); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		runtime.GC()
		w.statesMu.Lock()
		left := len(w.states)
		w.statesMu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d decoded states of pods no longer held are still cached after 30s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncedWatch watches the pods sel selects in namespace ns of client until the test ends, and
// returns once its cache holds them, with the watch's context.
func syncedWatch(t *testing.T, client *fake.Clientset, sel labels.Selector) (context.Context, *PodWatch) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := WatchPods(ctx, client, "ns", sel)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.HasSynced) {
		t.Fatal("the watch did not sync")
	}
	return ctx, w
}
