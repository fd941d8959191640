package rollout

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHoldPoints: a rollout held at 1 pod, then at 50%, then finished, each call with a fresh
// Engine; the same hold again writes nothing; a lower one holds where the rollout is; a hold is
// rolled back like a rollout in flight.
func TestHoldPoints(t *testing.T) {
	upTo := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	t.Run("hold, hold, finish", func(t *testing.T) {
		fc := newFakeCluster(t, clusterOpts{pods: 4})
		q := &fakeQuerier{}
		fc.query = q
		spec := fc.spec(imageV2, one, intstr.FromString("50%"), all)
		spec.Analysis = testAnalysis(t)
		steps := []struct {
			upTo    *intstr.IntOrString
			phase   Phase
			updated int
		}{
			{upTo(one), PhaseHolding, 1},
			{upTo(intstr.FromString("50%")), PhaseHolding, 2},
			{upTo(intstr.FromInt32(1)), PhaseHolding, 2}, // lower than reached: holds where it is
			{nil, PhaseSucceeded, 4},
		}
		var st Status
		for i, step := range steps {
			s := spec
			s.UpTo = step.upTo
			st = fc.mustDrive(fc.engine(), s, Status{}, nil)
			if st.Phase != step.phase || st.Updated != step.updated {
				t.Fatalf("step %d: %s with %d updated (%s); want %s with %d", i+1, st.Phase, st.Updated, st.Message, step.phase, step.updated)
			}
			if l := fc.lock(); step.phase == PhaseHolding && (l.Phase != PhaseHolding || l.AcceptedPods != step.updated) {
				t.Errorf("step %d: lock %s with %d pods accepted; want Holding with %d", i+1, l.Phase, l.AcceptedPods, step.updated)
			}
			if step.phase == PhaseHolding {
				before := fc.snapshot()
				if again := fc.mustDrive(fc.engine(), s, st, nil); again.Phase != PhaseHolding || fc.snapshot() != before {
					t.Errorf("step %d: the same hold again: %s, and the cluster changed: %v", i+1, again.Phase, fc.snapshot() != before)
				}
			}
		}
		for name, n := range fc.restarts() {
			if n != 1 {
				t.Errorf("pod %s restarted %d times, want once", name, n)
			}
		}
		if q.measured() == 0 {
			t.Error("no analysis measured anything")
		}
	})
	t.Run("rollback from a hold", func(t *testing.T) {
		fc := newFakeCluster(t, clusterOpts{pods: 3})
		spec := fc.spec(imageV2, one, all)
		spec.UpTo = upTo(one)
		st := fc.mustDrive(fc.engine(), spec, Status{}, nil)
		if st.Phase != PhaseHolding {
			t.Fatalf("%s (%s), want Holding", st.Phase, st.Message)
		}
		if st = driveRollback(fc, fc.engine(), spec, st); st.Phase != PhaseRolledBack || st.RolledBack != 1 {
			t.Fatalf("rollback: %s with %d rolled back (%s); want RolledBack with 1", st.Phase, st.RolledBack, st.Message)
		}
		fc.play()
		fc.assertOnImage(imageV1)
	})
}
