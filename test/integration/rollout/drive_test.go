package rollout_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// noData answers every analysis query with an empty result: every check is Inconclusive.
type noData struct{}

func (noData) Query(context.Context, string) (float64, bool, error) { return 0, false, nil }

// analysedSpec rolls web in ns out to appV2 in two batches, each analysed once through noData.
func analysedSpec(t *testing.T, ns, onInconclusive string) rollout.Spec {
	t.Helper()
	cfg, err := analysis.Decode([]byte("prometheus: {address: 'http://prometheus.invalid:9090'}\ninterval: 1s\ncount: 1\ninitialDelay: 0s\n"))
	if err != nil {
		t.Fatal(err)
	}
	return rollout.Spec{
		Target:  workload.Ref{Kind: workload.StatefulSet, Namespace: ns, Name: "web"},
		Images:  map[string]string{"app": appV2},
		Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("100%")},
		Holder:  "test", MaxUnavailable: intstr.FromInt32(1), Timeout: 5 * time.Minute,
		Analysis: cfg, OnInconclusive: onInconclusive,
	}
}

// driveContext bounds a Drive call, so that a rollout that never settles fails the test.
func driveContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestDriveRunsARolloutToItsEnd: one Drive call takes a StatefulSet through both batches and
// their analyses to Succeeded, and onStatus sees every phase on the way, in order.
func TestDriveRunsARolloutToItsEnd(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 3)
	before := identities(t, ns, "app=web")
	engine := &rollout.Engine{Client: env.Client, Querier: noData{}}

	var phases []rollout.Phase
	var analysed []int // the batch of each Analyzing status
	st, err := (&rollout.Driver{Engine: engine}).Drive(driveContext(t), analysedSpec(t, ns, rollout.InconclusiveContinue), func(s rollout.Status) {
		if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
			phases = append(phases, s.Phase)
		}
		if s.Phase == rollout.PhaseAnalyzing && s.Analysis != nil && !slices.Contains(analysed, s.Analysis.Batch) {
			analysed = append(analysed, s.Analysis.Batch)
		}
	})
	if err != nil || st.Phase != rollout.PhaseSucceeded {
		t.Fatalf("Drive: %s (%s), error %v; want Succeeded", st.Phase, st.Message, err)
	}
	want := []rollout.Phase{rollout.PhaseProgressing, rollout.PhaseAnalyzing, rollout.PhaseProgressing, rollout.PhaseAnalyzing, rollout.PhaseProgressing, rollout.PhaseSucceeded}
	if !slices.Equal(phases, want) {
		t.Errorf("onStatus saw phases %v, want %v", phases, want)
	}
	if !slices.Equal(analysed, []int{1, 2}) {
		t.Errorf("analysed batches %v, want [1 2]", analysed)
	}
	if st.Updated != 3 || st.Total != 3 {
		t.Errorf("final status: %d/%d updated, want 3/3", st.Updated, st.Total)
	}
	podsOnImage(t, ns, "app=web", appV2)
	checkInPlace(t, before, identities(t, ns, "app=web"), 1)
}

// TestAcceptNamesTheRolloutAndTheBatch: a rollout paused by an inconclusive analysis goes on
// only when accepted with its own rollout ID and the batch it paused on. A stale accept (another
// rollout, another batch, a batch already accepted) writes nothing, and a pause reached later is
// not accepted by an earlier accept.
func TestAcceptNamesTheRolloutAndTheBatch(t *testing.T) {
	ns := env.Namespace(t)
	createStatefulSet(t, ns, "web", 2)
	spec := analysedSpec(t, ns, rollout.InconclusivePause)
	engine := &rollout.Engine{Client: env.Client, Querier: noData{}}
	ctx := driveContext(t)

	// paused drives the rollout until it pauses, which it must do on batch.
	paused := func(batch int) rollout.Status {
		t.Helper()
		st, err := (&rollout.Driver{Engine: engine}).Drive(ctx, spec, nil)
		if err != nil || st.Phase != rollout.PhasePaused || st.Analysis == nil || st.Analysis.Batch != batch {
			t.Fatalf("Drive: %s (%s), analysis %+v, error %v; want Paused on batch %d", st.Phase, st.Message, st.Analysis, err, batch)
		}
		return st
	}
	// refused checks that an accept is refused as bad input and leaves the StatefulSet as it was.
	refused := func(what string, p rollout.Pause) {
		t.Helper()
		before := settled(t, ns)
		_, err := engine.Accept(ctx, spec.Target, spec.Holder, p)
		var invalid *rollout.InvalidError
		if !errors.As(err, &invalid) {
			t.Errorf("accept of %s: %T %v; want an *InvalidError", what, err, err)
		}
		after := getStatefulSet(t, ns)
		if after.ResourceVersion != before.ResourceVersion || after.Annotations[workload.LockAnnotation] != before.Annotations[workload.LockAnnotation] {
			t.Errorf("accept of %s wrote to the StatefulSet: resourceVersion %s -> %s\nlock before %s\nlock after  %s", what,
				before.ResourceVersion, after.ResourceVersion, before.Annotations[workload.LockAnnotation], after.Annotations[workload.LockAnnotation])
		}
		t.Logf("accept of %s refused: %v", what, err)
	}
	accept := func(p rollout.Pause) {
		t.Helper()
		st, err := engine.Accept(ctx, spec.Target, spec.Holder, p)
		if err != nil || st.Phase != rollout.PhaseProgressing {
			t.Fatalf("accept of batch %d: %s (%s), error %v; want Progressing", p.Batch, st.Phase, st.Message, err)
		}
	}
	pauseOf := func(st rollout.Status) rollout.Pause {
		t.Helper()
		p, ok := rollout.PauseOf(st)
		if !ok {
			t.Fatalf("status %s reports no pause", st.Phase)
		}
		return p
	}

	first := pauseOf(paused(1))
	refused("another batch", rollout.Pause{RolloutID: first.RolloutID, Batch: 2, Pods: first.Pods})
	refused("the same batch at another pod count", rollout.Pause{RolloutID: first.RolloutID, Batch: 1, Pods: first.Pods + 1})
	refused("another rollout", rollout.Pause{RolloutID: "0123456789-1767225600", Batch: 1, Pods: first.Pods})
	accept(first)
	refused("a batch already accepted", first)

	secondStatus := paused(2)
	if secondStatus.RolloutID != first.RolloutID || secondStatus.Updated != 2 {
		t.Fatalf("second pause: rollout %s with %d pods updated; want %s with 2", secondStatus.RolloutID, secondStatus.Updated, first.RolloutID)
	}
	refused("the batch before", first)
	accept(pauseOf(secondStatus))
	st, err := (&rollout.Driver{Engine: engine}).Drive(ctx, spec, nil)
	if err != nil || st.Phase != rollout.PhaseSucceeded {
		t.Fatalf("Drive after the last accept: %s (%s), error %v; want Succeeded", st.Phase, st.Message, err)
	}
	podsOnImage(t, ns, "app=web", appV2)
}

func getStatefulSet(t *testing.T, ns string) *appsv1.StatefulSet {
	t.Helper()
	sts, err := env.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// settled waits until the StatefulSet controller has caught up with web's pods, so that its
// own status writes do not change the resourceVersion a test compares.
func settled(t *testing.T, ns string) *appsv1.StatefulSet {
	t.Helper()
	return waitStatefulSet(t, ns, "web", "the controller caught up", func(s *appsv1.StatefulSet) bool {
		return s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == *s.Spec.Replicas && s.Status.AvailableReplicas == *s.Spec.Replicas
	})
}
