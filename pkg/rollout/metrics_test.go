package rollout

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// countingMetrics records the engine's events, by workload.
type countingMetrics struct {
	mu        sync.Mutex
	updated   map[string]int
	rollbacks map[string]int
	batches   map[string][]time.Duration
	verdicts  map[string]int // by workload and verdict, "W verdict"
}

func newCountingMetrics() *countingMetrics {
	return &countingMetrics{updated: map[string]int{}, rollbacks: map[string]int{}, batches: map[string][]time.Duration{}, verdicts: map[string]int{}}
}

func key(ref workload.Ref) string { return ref.Namespace + " " + WorkloadName(ref) }

func (m *countingMetrics) PodsUpdated(ref workload.Ref, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updated[key(ref)] += n
}

func (m *countingMetrics) RolledBack(ref workload.Ref) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollbacks[key(ref)]++
}

func (m *countingMetrics) BatchDone(ref workload.Ref, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches[key(ref)] = append(m.batches[key(ref)], d)
}

func (m *countingMetrics) Verdict(ref workload.Ref, v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.verdicts[key(ref)+" "+v]++
}

// TestMetricsCountEachEventOnce drives rollouts on a fake cluster and checks that each event
// is reported once, also when the driver is replaced by a new one part way.
func TestMetricsCountEachEventOnce(t *testing.T) {
	const web = testNS + " StatefulSet/" + testName
	tests := []struct {
		name     string
		verdict  analysis.Verdict
		restarts bool
		// wanted counts
		updated, rollbacks, batches int
		verdicts                    map[string]int
		phase                       Phase
	}{
		{name: "succeeded", verdict: analysis.Pass, updated: 4, batches: 3,
			verdicts: map[string]int{web + " Pass": 3}, phase: PhaseSucceeded},
		{name: "succeeded, a new driver after every step", verdict: analysis.Pass, restarts: true, updated: 4, batches: 3,
			verdicts: map[string]int{web + " Pass": 3}, phase: PhaseSucceeded},
		{name: "analysis failed", verdict: analysis.Fail, updated: 1, rollbacks: 1, batches: 1,
			verdicts: map[string]int{web + " Fail": 1}, phase: PhaseRolledBack},
		{name: "analysis failed, a new driver after every step", verdict: analysis.Fail, restarts: true, updated: 1, rollbacks: 1, batches: 1,
			verdicts: map[string]int{web + " Fail": 1}, phase: PhaseRolledBack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 4})
			fc.query.set(tt.verdict)
			spec := fc.spec(imageV2, intstr.FromInt32(1), intstr.FromString("50%"), intstr.FromString("100%"))
			spec.Analysis = testAnalysis(t)
			m := newCountingMetrics()
			e := fc.engine()
			e.Metrics = m
			var st Status
			if tt.restarts {
				// A driver that stops after each step loses its status: the next one starts
				// from nothing, as after a crash.
				for range maxSteps {
					e := fc.engine()
					e.Metrics = m
					next, err := fc.drive(e, spec, Status{RolloutID: st.RolloutID}, func(Status) bool { return true }, nil)
					if err != nil {
						t.Fatalf("Reconcile: %v", err)
					}
					st = next
					if st.Phase.Settled() {
						break
					}
					fc.play()
					fc.now = fc.now.Add(tick)
				}
			} else {
				st = fc.mustDrive(e, spec, Status{}, nil)
				if st.Phase == PhaseRollingBack {
					st = driveRollback(fc, e, spec, st)
				}
			}
			if st.Phase != tt.phase {
				t.Fatalf("phase %s (%s), want %s", st.Phase, st.Message, tt.phase)
			}
			if got := m.updated[web]; got != tt.updated {
				t.Errorf("pods updated %d, want %d", got, tt.updated)
			}
			if got := m.rollbacks[web]; got != tt.rollbacks {
				t.Errorf("rollbacks %d, want %d", got, tt.rollbacks)
			}
			if got := len(m.batches[web]); got != tt.batches {
				t.Errorf("batches done %d (%v), want %d", got, m.batches[web], tt.batches)
			}
			for _, d := range m.batches[web] {
				if d <= 0 {
					t.Errorf("batch duration %s, want more than 0 (the fake clock moves %s a step)", d, tick)
				}
			}
			if len(m.verdicts) != len(tt.verdicts) {
				t.Errorf("verdicts %v, want %v", m.verdicts, tt.verdicts)
			}
			for k, n := range tt.verdicts {
				if m.verdicts[k] != n {
					t.Errorf("verdicts %v, want %v", m.verdicts, tt.verdicts)
				}
			}
		})
	}
}

// TestLogLinesNameTheRollout drives rollouts (one rolled back by its analysis) with the log
// captured, and checks that every line names the namespace, the workload and the rollout.
func TestLogLinesNameTheRollout(t *testing.T) {
	tests := []struct {
		name    string
		kind    workload.Kind
		verdict analysis.Verdict
		want    string // a line that must be there
	}{
		{name: "StatefulSet succeeded", verdict: analysis.Pass, want: "rollout succeeded"},
		{name: "StatefulSet rolled back", verdict: analysis.Fail, want: "rolled back"},
		{name: "pods by selector", kind: workload.Pods, verdict: analysis.Pass, want: "rollout succeeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, clusterOpts{pods: 3, kind: tt.kind})
			fc.query.set(tt.verdict)
			spec := fc.spec(imageV2, intstr.FromInt32(1), intstr.FromString("100%"))
			spec.Analysis = testAnalysis(t)
			var buf bytes.Buffer
			e := fc.engine()
			e.Log = slog.New(slog.NewJSONHandler(&buf, nil))
			st := fc.mustDrive(e, spec, Status{}, nil)
			if st.Phase == PhaseRollingBack {
				st = driveRollback(fc, e, spec, st)
			}
			lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
			seen := map[string]bool{}
			for _, line := range lines {
				var rec map[string]any
				if err := json.Unmarshal(line, &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				seen[rec["msg"].(string)] = true
				if rec["namespace"] != testNS || rec["workload"] != WorkloadName(spec.Target) || rec["rolloutID"] != st.RolloutID {
					t.Errorf("log line %s: want namespace %q, workload %q, rolloutID %q", line, testNS, WorkloadName(spec.Target), st.RolloutID)
				}
			}
			for _, msg := range []string{"rollout started", "pod written", "analysis started", tt.want} {
				if !seen[msg] {
					t.Errorf("no log line %q among %d lines:\n%s", msg, len(lines), buf.String())
				}
			}
		})
	}
}

func TestWorkloadName(t *testing.T) {
	tests := []struct {
		ref  workload.Ref
		want string
	}{
		{workload.Ref{Kind: workload.StatefulSet, Namespace: "shop", Name: "db"}, "StatefulSet/db"},
		{workload.Ref{Kind: workload.Deployment, Namespace: "shop", Name: "api"}, "Deployment/api"},
		{workload.Ref{Kind: workload.Pods, Namespace: "shop", Selector: "app=web"}, "Pods/app=web"},
	}
	for _, tt := range tests {
		if got := WorkloadName(tt.ref); got != tt.want {
			t.Errorf("WorkloadName(%+v) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}
