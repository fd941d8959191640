package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// TestEventsPerBatch: a rollout records an Event on the workload when each batch starts and one
// when it ends, and none on a pod whose update goes as planned; a pod whose update fails has its
// own Events, and so has a pod a rollback puts back.
func TestEventsPerBatch(t *testing.T) {
	tests := []struct {
		name string
		// image is the target; crash-looping, the first batch fails and rolls back.
		image string
		// workload are the reasons of the workload's Events, in order of their notes' batch;
		// pods are the reasons some pod's Events have, sorted and without repeats.
		workload []string
		pods     []string
	}{
		{"every batch goes as planned", imageV2,
			[]string{EventBatchUpdating + " batch 1/2", EventBatchUpdating + " batch 2/2", EventRolloutSucceeded}, nil},
		{"the first batch fails", imageCrash,
			[]string{EventBatchUpdating + " batch 1/2", EventRolloutRolledBack},
			[]string{inplace.EventRolledBack, inplace.EventRollingBack, inplace.EventUpdateFailed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The second batch's 4 pods go 2 at a time: one Event for the batch all the same.
			fc := newFakeCluster(t, clusterOpts{pods: 6})
			b, err := NewEventBroadcaster(fc.client, func(err error) { t.Errorf("Event not written: %v", err) })
			if err != nil {
				t.Fatal(err)
			}
			e := fc.engine()
			e.Events = b.Recorder("test")
			spec := fc.spec(tt.image, intstr.FromInt32(2), intstr.FromString("100%"))
			spec.MaxUnavailable = intstr.FromInt32(2)
			st := fc.mustDrive(e, spec, Status{}, nil)
			if st.Phase == PhaseRollingBack {
				st = driveRollback(fc, e, spec, st)
			}
			if err := b.Close(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			list, err := fc.client.EventsV1().Events(testNS).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var onWorkload, onPods []string
			for _, ev := range list.Items {
				switch ev.Regarding.Kind {
				case "StatefulSet":
					what := ev.Reason
					if ev.Reason == EventBatchUpdating {
						what += " " + strings.SplitN(ev.Note, ":", 2)[0]
					}
					onWorkload = append(onWorkload, what)
				case "Pod":
					if !slices.Contains(onPods, ev.Reason) {
						onPods = append(onPods, ev.Reason)
					}
				}
			}
			slices.Sort(onPods)
			if !slices.Equal(onWorkload, tt.workload) || !slices.Equal(onPods, tt.pods) {
				t.Errorf("rollout ended %s; Events on the StatefulSet %q, want %q; on pods %q, want %q", st.Phase, onWorkload, tt.workload, onPods, tt.pods)
			}
		})
	}
}
