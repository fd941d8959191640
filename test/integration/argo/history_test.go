package argo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// imageHistory is the sequence of images each pod's app container was given in its spec, as a
// watch saw them, one entry per change.
type imageHistory struct {
	mu   sync.Mutex
	pods map[string][]string
}

// recordImages watches the target's pods until the test ends and records every change of
// their app container's image.
func recordImages(t *testing.T, ns, target string) *imageHistory {
	t.Helper()
	h := &imageHistory{pods: map[string][]string{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + target }))
	inf := factory.Core().V1().Pods().Informer()
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || len(p.Spec.Containers) == 0 {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		seq := h.pods[p.Name]
		if img := p.Spec.Containers[0].Image; len(seq) == 0 || seq[len(seq)-1] != img {
			h.pods[p.Name] = append(seq, img)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatalf("watching the pods of %s/%s: the cache never synced", ns, target)
	}
	return h
}

func (h *imageHistory) of(pod string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pods[pod])
}

// checkHistory checks that no pod was given an image twice, but for a rollback's return to
// the image it started on (back), and that no container restarted more than once per image
// change: restarts are the counts before the test.
func checkHistory(t *testing.T, ns, target string, h *imageHistory, restarts map[string]int32, back bool) {
	t.Helper()
	for pod, r := range appRestarts(t, ns, target) {
		seq := h.of(pod)
		if len(seq) == 0 {
			t.Errorf("pod %s: no image recorded", pod)
			continue
		}
		seen := map[string]bool{}
		for i, img := range seq {
			if seen[img] && !(back && i == len(seq)-1 && img == seq[0]) {
				t.Errorf("pod %s was given %s twice: images %v", pod, img, seq)
			}
			seen[img] = true
		}
		if d := r - restarts[pod]; d > int32(len(seq)-1) {
			t.Errorf("pod %s: app restarted %d times for %d image changes %v", pod, d, len(seq)-1, seq)
		}
		t.Logf("pod %s: images %v, %d restarts", pod, seq, r-restarts[pod])
	}
}

// lockOf reads the rollout lock of the StatefulSet target, or nil.
func lockOf(t *testing.T, ns, target string) *rollout.Record {
	t.Helper()
	l, err := rollout.ReadRecord(context.Background(), env.Client, workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: target})
	if err != nil {
		t.Fatalf("reading the lock of StatefulSet %s/%s: %v", ns, target, err)
	}
	return l
}

// waitTraffic waits until Prometheus has a request rate for the namespace's pods, so that an
// analysis has a baseline to compare with.
func waitTraffic(t *testing.T, ns string) {
	t.Helper()
	q := url.Values{"query": {fmt.Sprintf(`sum(rate(http_requests_total{namespace=%q}[5s])) > 0`, ns)}}
	cluster.WaitFor(t, time.Minute, "Prometheus to see the traffic of namespace "+ns, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.PrometheusURL+"/api/v1/query?"+q.Encode(), nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var out struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return false, err
		}
		return len(out.Data.Result) > 0, nil
	})
	// A few seconds more fill the 5s window of the analyses here.
	time.Sleep(5 * time.Second)
}

// argoLog is the controller's log, plugins' stderr included, from byte offset on.
func argoLog(t *testing.T, offset int64) string {
	t.Helper()
	data, err := os.ReadFile(env.Argo.LogPath)
	if err != nil {
		t.Fatalf("reading the controller's log: %v", err)
	}
	if offset > int64(len(data)) {
		offset = 0
	}
	return string(data[offset:])
}

// argoLogSize is the controller log's size now, an offset for argoLog.
func argoLogSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(env.Argo.LogPath)
	if err != nil {
		t.Fatalf("reading the controller's log: %v", err)
	}
	return fi.Size()
}

// linesWith returns the lines of log that contain every one of words.
func linesWith(log string, words ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}
