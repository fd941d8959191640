package analysis_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
)

var analysisStarted = regexp.MustCompile(`msg="analysis started".* batch=(\d+) `)

// TestHoldPointsAcrossRestarts drives one rollout to a hold at 1 pod, then at 50%, then to the
// end, in separate Drive calls, each with a fresh Engine as a restarted driver would have: it holds at each point
// with the StatefulSet held, each batch is analysed once against the real Prometheus, and no pod
// is updated twice.
func TestHoldPointsAcrossRestarts(t *testing.T) {
	ns := newWeb(t)
	cfg, err := analysis.DecodeFile(writeConfig(t, env.PrometheusURL, promPassword, ""))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	updatedAt := map[string]time.Time{} // pod name -> when this rollout updated it
	steps := []struct {
		upTo    *intstr.IntOrString
		phase   rollout.Phase
		updated int
	}{
		{ptr(intstr.FromInt32(1)), rollout.PhaseHolding, 1},
		{ptr(intstr.FromString("50%")), rollout.PhaseHolding, 2},
		{nil, rollout.PhaseSucceeded, 4},
	}
	for i, step := range steps {
		engine := &rollout.Engine{Client: env.Client, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		spec := rollout.Spec{
			Target:  workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"},
			Images:  map[string]string{"app": clitest.AppV2},
			Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("50%"), intstr.FromString("100%")},
			UpTo:    step.upTo, Holder: "test", Analysis: cfg, MaxUnavailable: intstr.FromInt32(1), Timeout: 5 * time.Minute,
			// The caller's own spec, as the command line's: its inline password is its own.
			CallerCredentials: true,
		}
		st, err := settle(engine, spec)
		if err != nil || st.Phase != step.phase || st.Updated != step.updated {
			t.Fatalf("step %d (up to %v): %s with %d pods updated (%s), error %v; want %s with %d", i+1, step.upTo, st.Phase, st.Updated, st.Message, err, step.phase, step.updated)
		}
		lock := lockOf(t, ns)
		if step.phase == rollout.PhaseHolding && (lock.Phase != rollout.PhaseHolding || !lock.Active() || lock.AcceptedPods != step.updated) {
			t.Errorf("step %d: lock phase %s, %d pods accepted; want Holding, the workload held, %d accepted", i+1, lock.Phase, lock.AcceptedPods, step.updated)
		}
		if step.phase == rollout.PhaseHolding {
			sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil || sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
				t.Errorf("step %d: update strategy %+v (%v); want OnDelete while the rollout holds", i+1, sts.Spec.UpdateStrategy, err)
			}
		}
		updated := 0
		for _, p := range clitest.ListPods(t, env, ns, "app=web") {
			s, err := inplace.ReadState(&p)
			if err != nil || s == nil || inplace.Judged(&p, s, time.Now()) != inplace.StageUpdated {
				continue
			}
			updated++
			if at, ok := updatedAt[p.Name]; ok && !at.Equal(s.StageAt) {
				t.Errorf("step %d: pod %s was updated again (at %s, before at %s)", i+1, p.Name, s.StageAt, at)
			}
			updatedAt[p.Name] = s.StageAt
			if rc := appRestarts(&p); rc != 1 {
				t.Errorf("step %d: pod %s restarted its app container %d times, want once", i+1, p.Name, rc)
			}
		}
		if updated != step.updated {
			t.Errorf("step %d: %d pods record their update, want %d", i+1, updated, step.updated)
		}
	}
	var batches []string
	for _, m := range analysisStarted.FindAllStringSubmatch(logs.String(), -1) {
		batches = append(batches, m[1])
	}
	if got := len(batches); got != 3 || batches[0] != "1" || batches[1] != "2" || batches[2] != "3" {
		t.Errorf("analyses started for batches %v, want 1, 2 and 3, once each:\n%s", batches, logs.String())
	}
	noSecret(t, ns, logs.String())
}

func ptr[T any](v T) *T { return &v }

func appRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			return cs.RestartCount
		}
	}
	return -1
}

// settle drives the rollout until it settles (ends, pauses or holds), within 3 minutes.
func settle(engine *rollout.Engine, spec rollout.Spec) (rollout.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return (&rollout.Driver{Engine: engine}).Drive(ctx, spec, nil)
}
