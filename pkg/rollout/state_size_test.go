package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/analysis"
)

// constQuerier answers every query with one value, or fails every one quoting it, as a
// Prometheus error may.
type constQuerier struct {
	v    float64
	fail bool
}

func (c constQuerier) Query(_ context.Context, q string) (float64, bool, error) {
	if c.fail {
		return 0, false, errors.New("prometheus at http://prom:9090: bad_data: parse error in " + q)
	}
	return c.v, true, nil
}

// lockAfterAnalysis is the lock of a rollout of pods pods whose batch has been measured count
// times, encoded as the workload's annotation holds it.
func lockAfterAnalysis(t *testing.T, pods int, q analysis.Querier) []byte {
	t.Helper()
	cfg, err := analysis.Decode([]byte("prometheus: {address: 'http://prom:9090'}\ncount: 5\ninterval: 1s\ninitialDelay: 0s\n" +
		"checks: {custom: [{name: ready, query: 'min(up{pod=~\"{{.Pods}}\"})', condition: result > 0}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var updated, stable []string
	for i := range pods {
		name := fmt.Sprintf("web-%05d", i)
		if i%2 == 0 {
			updated = append(updated, name)
		} else {
			stable = append(stable, name)
		}
	}
	a := &analysis.Analyzer{Config: cfg, Querier: q}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := analysis.NewRun(cfg, 2, t0)
	for i := range 5 {
		run, _ = a.Step(context.Background(), run, analysis.Scope{Namespace: "shop", Pods: updated, StablePods: stable}, t0.Add(time.Duration(i)*time.Second))
	}
	lock := &Record{
		Holder: "argo:shop/web", RolloutID: "0123456789-1767225600", SpecHash: "0123456789abcdef",
		Images: map[string]string{"app": "registry.example/app:v2"}, PreviousImages: map[string]string{"app": "registry.example/app:v1"},
		Phase: PhaseProgressing, StartedAt: t0, ProgressAt: t0, AcceptedPods: 1, Analysis: encodeRun(run),
	}
	if run.Queries == 0 || len(run.Last) == 0 {
		t.Fatalf("the analysis measured nothing: %+v", run)
	}
	data, err := json.Marshal(lock)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLockSizeDoesNotGrowWithPods: the lock, analysis state included, is as big for 5,000 pods
// as for 10, and small; Status, which embeds the same analysis, likewise.
func TestLockSizeDoesNotGrowWithPods(t *testing.T) {
	const bound = 16 << 10
	for _, q := range []constQuerier{{v: 0.01}, {fail: true}} {
		small, large := lockAfterAnalysis(t, 10, q), lockAfterAnalysis(t, 5000, q)
		t.Logf("failing queries %v: lock of 10 pods %d bytes, of 5,000 pods %d bytes", q.fail, len(small), len(large))
		if len(large) != len(small) {
			t.Errorf("failing queries %v: the lock grew from %d bytes at 10 pods to %d at 5,000", q.fail, len(small), len(large))
		}
		if len(large) > bound {
			t.Errorf("failing queries %v: the lock takes %d bytes at 5,000 pods, over %d:\n%s", q.fail, len(large), bound, large)
		}
		if strings.Contains(string(large), "web-00001") {
			t.Errorf("failing queries %v: the lock lists pods:\n%s", q.fail, large)
		}
	}
}
