package rollout_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// TestLockWriteOutlivesStatusWrites: on the real API server, a lock-only write goes through
// although the StatefulSet's status and labels were written since it was read; it is a conflict,
// and writes nothing, once the lock or the spec changed; and a write the server refuses for
// itself (annotations past their size limit) keeps the server's own error.
func TestLockWriteOutlivesStatusWrites(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 1)
	ctx := context.Background()
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"}
	stses := env.Client.AppsV1().StatefulSets(ns)
	// counted is the client of the workload: it records the requests it sends.
	var mu sync.Mutex
	var requests []string
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			requests = append(requests, r.Method)
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	counted, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := requests
		requests = nil
		return out
	}
	lockOf := func(id string) string {
		return `{"holder":"cli","rolloutID":"` + id + `","images":{"app":"` + appV2 + `"},"phase":"Progressing"}`
	}
	patch := func(what string, body map[string]any) {
		t.Helper()
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stses.Patch(ctx, "web", types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// load reads the StatefulSet with its lock, then the object changes by change.
	load := func(change func()) workload.Workload {
		t.Helper()
		w, err := workload.Load(ctx, counted, ref)
		if err != nil {
			t.Fatal(err)
		}
		change()
		return w
	}
	storedLock := func() string {
		t.Helper()
		sts, err := stses.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sts.Annotations[workload.LockAnnotation]
	}
	// writeStatus writes the status, as the controller does (and races it), then a label.
	writeStatus := func() {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			sts, err := stses.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			sts.Status.CollisionCount = ptr.To(ptr.Deref(sts.Status.CollisionCount, 0) + 1)
			_, err = stses.UpdateStatus(ctx, sts, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("writing the status: %v", err)
		}
		patch("labelling", map[string]any{"metadata": map[string]any{"labels": map[string]any{"touched": "yes"}}})
	}
	patch("locking", map[string]any{"metadata": map[string]any{"annotations": map[string]any{workload.LockAnnotation: lockOf("a")}}})

	w := load(writeStatus)
	sent()
	if err := w.SetLock(ctx, lockOf("a2")); err != nil {
		t.Fatalf("lock write after status and label writes: %v; want it written", err)
	}
	if got := sent(); !slices.Equal(got, []string{http.MethodPatch}) {
		t.Errorf("lock write after status and label writes sent %v; want one PATCH, nothing to retry", got)
	}
	if got := storedLock(); got != lockOf("a2") {
		t.Fatalf("stored lock %s; want %s", got, lockOf("a2"))
	}

	for _, tt := range []struct {
		name   string
		change func()
		want   string
	}{
		{"lock written meanwhile", func() {
			patch("writing another lock", map[string]any{"metadata": map[string]any{"annotations": map[string]any{workload.LockAnnotation: lockOf("b")}}})
		}, lockOf("b")},
		{"spec written meanwhile", func() {
			patch("scaling", map[string]any{"spec": map[string]any{"replicas": 2}})
		}, lockOf("b")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := load(tt.change)
			err := w.SetLock(ctx, lockOf("c"))
			if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "StatefulSet "+ns+"/web") {
				t.Errorf("lock write: %v; want a conflict naming the StatefulSet", err)
			}
			if got := storedLock(); got != tt.want {
				t.Errorf("stored lock %s; want %s, unchanged", got, tt.want)
			}
		})
	}

	w = load(writeStatus)
	t.Run("refused by the server", func(t *testing.T) {
		huge := lockOf(strings.Repeat("x", 300<<10))
		err := w.SetLock(ctx, huge)
		if !apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			t.Errorf("lock write past the annotations' size limit: %v; want the server's Invalid", err)
		}
		if got := storedLock(); got != lockOf("b") {
			t.Errorf("stored lock %.80s; want %s, unchanged", got, lockOf("b"))
		}
	})
}

// roundTripper is a function that sends a request.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
