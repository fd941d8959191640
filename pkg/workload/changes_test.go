package workload

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
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
// copies the caller may change, and sends anything else to the API server.
func TestPodWatchLists(t *testing.T) {
	client := fake.NewClientset(runningPod("web-a", "reg/app:v1", nil, nil), runningPod("web-b", "reg/app:v1", nil, nil),
		runningPod("db-a", "reg/db:v1", map[string]string{"app": "db"}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := WatchPods(ctx, client, "ns", labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.HasSynced) {
		t.Fatal("the watch did not sync")
	}
	client.ClearActions()
	pods, err := w.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil || len(pods) != 2 {
		t.Fatalf("ListPods = %d pods, %v; want web-a and web-b", len(pods), err)
	}
	pods[0].Labels["changed"] = "by the caller"
	again, _ := w.ListPods(ctx, "ns", labels.SelectorFromSet(labels.Set{"app": "web"}))
	for _, p := range again {
		if p.Labels["changed"] != "" {
			t.Errorf("a caller's change reached the cache: pod %s", p.Name)
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
