package rollout

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestMilestoneEvents: a rollout records an Event on the workload at each milestone (started,
// each batch starting, each batch's analysis passed, paused, holding, halted, rolling back, how
// it ended), once: driven again where it settled, it records none. None is recorded on a pod
// whose update goes as planned; a pod whose update fails has its own Events, and so has a pod a
// rollback puts back.
func TestMilestoneEvents(t *testing.T) {
	tests := []struct {
		name string
		// image is the target; crash-looping, the first batch fails and rolls back.
		image string
		// spec changes the spec: an analysis answered with verdict, a hold point.
		spec    func(fc *fakeCluster, s *Spec)
		verdict analysis.Verdict
		// then is done where the rollout settled: "halt" changes the template under it and
		// steps once; "rollback" rolls it back.
		then []string
		// workload are the reasons of the workload's Events in the order they were recorded,
		// with the batch their note names, if any; pods are the reasons some pod's Events
		// have, sorted and without repeats.
		workload []string
		pods     []string
		// notified are the kinds of the notifications sent, in order.
		notified []NotificationKind
	}{
		{name: "every batch goes as planned", image: imageV2,
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventBatchUpdating + " batch 2/2", EventRolloutSucceeded},
			notified: []NotificationKind{NotifySucceeded}},
		{name: "the first batch fails", image: imageCrash,
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventRolloutRollingBack, EventRolloutRolledBack},
			pods:     []string{inplace.EventRolledBack, inplace.EventRollingBack, inplace.EventUpdateFailed},
			notified: []NotificationKind{NotifyRolledBack}},
		{name: "each batch passes its analysis", image: imageV2, spec: withAnalysis, verdict: analysis.Pass,
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventBatchPassed + " batch 1/2",
				EventBatchUpdating + " batch 2/2", EventBatchPassed + " batch 2/2", EventRolloutSucceeded},
			notified: []NotificationKind{NotifySucceeded}},
		{name: "an inconclusive analysis pauses", image: imageV2, spec: withAnalysis, verdict: analysis.Inconclusive,
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventRolloutPaused},
			notified: []NotificationKind{NotifyPaused}},
		{name: "held, then rolled back", image: imageV2, spec: holdAt(intstr.FromInt32(2)), then: []string{"rollback"},
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventRolloutHolding, EventRolloutRollingBack, EventRolloutRolledBack},
			pods:     []string{inplace.EventRolledBack, inplace.EventRollingBack},
			notified: []NotificationKind{NotifyRolledBack}},
		{name: "halted by a template change", image: imageV2, spec: holdAt(intstr.FromInt32(2)), then: []string{"halt"},
			workload: []string{EventRolloutStarted, EventBatchUpdating + " batch 1/2", EventRolloutHolding, EventRolloutHalted},
			notified: []NotificationKind{NotifyNeedsPerson}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The second batch's 4 pods go 2 at a time: one Event for the batch all the same.
			fc := newFakeCluster(t, clusterOpts{pods: 6})
			fc.query.set(tt.verdict)
			b, err := NewEventBroadcaster(fc.client, func(err error) { t.Errorf("Event not written: %v", err) })
			if err != nil {
				t.Fatal(err)
			}
			e := fc.engine()
			e.Events = b.Recorder("test")
			notes := &notifications{}
			e.Notifier = notes
			spec := fc.spec(tt.image, intstr.FromInt32(2), intstr.FromString("100%"))
			spec.MaxUnavailable = intstr.FromInt32(2)
			if tt.spec != nil {
				tt.spec(fc, &spec)
			}
			st := fc.mustDrive(e, spec, Status{}, nil)
			if st.Phase == PhaseRollingBack {
				st = driveRollback(fc, e, spec, st)
			}
			// Driven again where it settled, the rollout reaches no milestone again.
			if again := fc.mustDrive(e, spec, st, nil); again.Phase != st.Phase {
				t.Fatalf("driven again, the rollout went from %s to %s", st.Phase, again.Phase)
			}
			for _, then := range tt.then {
				switch then {
				case "halt":
					fc.setTemplateImage("reg.example/app:v9")
					if st, _, err = e.Reconcile(context.Background(), spec, st); err != nil || st.Reason != ReasonTemplateChanged {
						t.Fatalf("after the template changed: %+v, %v; want TemplateChanged", st, err)
					}
					// Stepped again, it is still halted, and says so no more.
					if _, _, err = e.Reconcile(context.Background(), spec, st); err != nil {
						t.Fatal(err)
					}
				case "rollback":
					st = driveRollback(fc, e, spec, st)
				}
			}
			if err := b.Close(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			onWorkload, onPods := eventReasons(t, fc)
			if !slices.Equal(onWorkload, tt.workload) || !slices.Equal(onPods, tt.pods) {
				t.Errorf("rollout ended %s; Events on the StatefulSet %q, want %q; on pods %q, want %q", st.Phase, onWorkload, tt.workload, onPods, tt.pods)
			}
			var kinds []NotificationKind
			for _, n := range notes.sent {
				kinds = append(kinds, n.Kind)
				if n.RolloutID != st.RolloutID || n.Target != spec.Target || n.Message == "" {
					t.Errorf("notification %+v: want rollout %s of %s, with a message", n, st.RolloutID, spec.Target)
				}
			}
			if !slices.Equal(kinds, tt.notified) {
				t.Errorf("notified %q, want %q", kinds, tt.notified)
			}
		})
	}
}

// holdAt gives a spec the hold point upTo.
func holdAt(upTo intstr.IntOrString) func(*fakeCluster, *Spec) {
	return func(_ *fakeCluster, s *Spec) { s.UpTo = &upTo }
}

// withAnalysis gives a spec the test analysis, which the fake cluster's querier answers.
func withAnalysis(fc *fakeCluster, s *Spec) { s.Analysis = testAnalysis(fc.t) }

// batchOf is the first "batch i/n" of an Event's note.
var batchOf = regexp.MustCompile(`batch \d+/\d+`)

// eventReasons are the reasons of the Events on the StatefulSet, in the order they were
// recorded (an Event's name ends in the hex of its time), each with the batch its note names,
// if any; and the reasons of the pods' Events, sorted and without repeats.
func eventReasons(t *testing.T, fc *fakeCluster) (onWorkload, onPods []string) {
	t.Helper()
	list, err := fc.client.EventsV1().Events(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		switch ev.Regarding.Kind {
		case "StatefulSet":
			what := ev.Reason
			if b := batchOf.FindString(ev.Note); b != "" && (ev.Reason == EventBatchUpdating || ev.Reason == EventBatchPassed) {
				what += " " + b
			}
			onWorkload = append(onWorkload, what)
		case "Pod":
			if !slices.Contains(onPods, ev.Reason) {
				onPods = append(onPods, ev.Reason)
			}
		}
	}
	slices.Sort(onPods)
	return onWorkload, onPods
}

// notifications is a Notifier that keeps what it is sent.
type notifications struct{ sent []Notification }

func (n *notifications) Notify(x Notification) { n.sent = append(n.sent, x) }
