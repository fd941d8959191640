package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/prepull"
)

// imageMissing is an image no registry has: a pull of it fails.
const imageMissing = "reg.example/app:missing"

func puller(node string, phase corev1.PodPhase, waiting string) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: prepull.Name("r1", node), Labels: map[string]string{prepull.LabelRollout: "r1"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "pull-0", Image: imageV2}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if waiting != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "pull-0", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting, Message: "manifest unknown"}}}}
	}
	return p
}

func created(p corev1.Pod, at time.Time) corev1.Pod {
	p.CreationTimestamp = metav1.NewTime(at)
	return p
}

func onNode(name, node string) *corev1.Pod {
	p := runningPod(name, imageV1)
	p.Spec.NodeName = node
	return p
}

func TestDecidePulls(t *testing.T) {
	tests := []struct {
		name    string
		pullers []corev1.Pod
		next    []*corev1.Pod
		create  []string
		remove  []string
		pulled  []string
		failed  string
	}{
		{name: "nodes without a puller get one", next: []*corev1.Pod{onNode("a", "n1"), onNode("b", "n2"), onNode("c", "n1")}, create: []string{"n1", "n2"}},
		{name: "a pulling puller is waited for", pullers: []corev1.Pod{puller("n1", corev1.PodPending, "")}, next: []*corev1.Pod{onNode("a", "n1")}},
		{name: "a pulled node whose pods wait keeps its puller", pullers: []corev1.Pod{puller("n1", corev1.PodSucceeded, "")},
			next: []*corev1.Pod{onNode("a", "n1")}, pulled: []string{"n1"}},
		{name: "a pulled node with no pod waiting loses its puller", pullers: []corev1.Pod{puller("n1", corev1.PodSucceeded, ""), puller("n2", corev1.PodSucceeded, "")},
			next: []*corev1.Pod{onNode("a", "n2")}, remove: []string{"n1"}, pulled: []string{"n1", "n2"}},
		{name: "a failed pull fails", pullers: []corev1.Pod{puller("n1", corev1.PodPending, "ErrImagePull")}, next: []*corev1.Pod{onNode("a", "n1")},
			failed: "on node n1: ErrImagePull: manifest unknown"},
		{name: "an unscheduled pod needs no puller", next: []*corev1.Pod{onNode("a", "")}},
		{name: "a puller pulling past the deadline failed", pullers: []corev1.Pod{created(puller("n1", corev1.PodPending, ""), t0.Add(-time.Minute))},
			next: []*corev1.Pod{onNode("a", "n1")}, failed: "on node n1 pulled nothing within 1m0s"},
		{name: "a puller pulling within the deadline is waited for", pullers: []corev1.Pod{created(puller("n1", corev1.PodPending, ""), t0.Add(-time.Second))},
			next: []*corev1.Pod{onNode("a", "n1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := decidePulls(tt.pullers, tt.next, t0, time.Minute)
			var create, remove, pulled []string
			for n := range plan.create {
				create = append(create, n)
			}
			for _, p := range plan.remove {
				remove = append(remove, p.Spec.NodeName)
			}
			for n := range plan.pulled {
				pulled = append(pulled, n)
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"create", create, tt.create}, {"remove", remove, tt.remove}, {"pulled", pulled, tt.pulled}} {
				if strings.Join(sorted(c.got), ",") != strings.Join(c.want, ",") {
					t.Errorf("%s %v, want %v", c.what, c.got, c.want)
				}
			}
			if (tt.failed == "") != (plan.failed == "") || !strings.Contains(plan.failed, tt.failed) {
				t.Errorf("failed %q, want %q", plan.failed, tt.failed)
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// prePullCluster is a fake cluster of pods spread over two nodes whose kubelets run puller
// pods: a puller of imageMissing fails its pull, any other finishes.
func prePullCluster(t *testing.T, pods int) *fakeCluster {
	t.Helper()
	fc := newFakeCluster(t, clusterOpts{pods: pods})
	for i, p := range fc.pods() {
		p.Spec.NodeName = []string{"node-a", "node-b"}[i%2]
		fc.updatePod(&p)
	}
	fc.pullers = true
	return fc
}

// pullerPods lists the puller pods of every rollout.
func (fc *fakeCluster) pullerPods() []corev1.Pod {
	fc.t.Helper()
	list, err := prepull.List(context.Background(), fc.client, testNS, "")
	if err != nil {
		fc.t.Fatal(err)
	}
	return list
}

// TestPrePull drives rollouts with pre-pull: no pod restarts before its node pulled the new
// images, a failed pull rolls back before any pod restarts, and no puller outlives the rollout.
func TestPrePull(t *testing.T) {
	t.Run("every pod starts after its node pulled", func(t *testing.T) {
		fc := prePullCluster(t, 4)
		e := fc.engine()
		e.PullerImage = "reg.example/inplace-rollout:test"
		spec := fc.spec(imageV2, one, all)
		spec.PrePull = true
		sawPullers := false
		pulled := map[string]bool{} // nodes whose puller was seen done
		st, err := fc.drive(e, spec, Status{}, nil, func(Status) {
			for _, pp := range fc.pullerPods() {
				sawPullers = true
				if pp.Status.Phase == corev1.PodSucceeded {
					pulled[pp.Spec.NodeName] = true
				}
			}
			for _, p := range fc.pods() {
				if p.Labels[prepull.LabelRollout] == "" && p.Spec.Containers[0].Image == imageV2 && !pulled[p.Spec.NodeName] {
					t.Errorf("pod %s patched before its node %s pulled the new image", p.Name, p.Spec.NodeName)
				}
			}
		})
		if err != nil || st.Phase != PhaseSucceeded {
			t.Fatalf("rollout = %+v, %v", st, err)
		}
		if !sawPullers {
			t.Error("no puller pod was ever created")
		}
		if left := fc.pullerPods(); len(left) > 0 {
			t.Errorf("%d puller pods outlive the rollout", len(left))
		}
		fc.assertOnImage(imageV2)
	})
	t.Run("pods wait for a slow pull", func(t *testing.T) {
		fc := prePullCluster(t, 4)
		fc.slowPulls = map[string]bool{"node-a": true, "node-b": true}
		e := fc.engine()
		e.PullerImage = "reg.example/inplace-rollout:test"
		spec := fc.spec(imageV2, one, all)
		spec.PrePull = true
		steps := 0
		st := fc.mustDrive(e, spec, Status{}, func(Status) bool { steps++; return steps == 20 })
		if !strings.Contains(st.Message, "waiting for the new images on the nodes of web-3") {
			t.Errorf("message %q, want the batch waiting for its pull", st.Message)
		}
		for _, p := range fc.pods() {
			if p.Labels[prepull.LabelRollout] == "" && p.Spec.Containers[0].Image != imageV1 {
				t.Errorf("pod %s patched while its node still pulls", p.Name)
			}
		}
		fc.slowPulls = nil
		if st := fc.mustDrive(e, spec, st, nil); st.Phase != PhaseSucceeded {
			t.Fatalf("rollout after the pull = %+v", st)
		}
		fc.assertOnImage(imageV2)
	})
	t.Run("a failed pull rolls back with no pod restarted", func(t *testing.T) {
		fc := prePullCluster(t, 4)
		e := fc.engine()
		e.PullerImage = "reg.example/inplace-rollout:test"
		before := fc.restarts()
		spec := fc.spec(imageMissing, one, all)
		spec.PrePull = true
		st, err := fc.drive(e, spec, Status{}, nil, nil)
		if err != nil || st.Phase != PhaseRolledBack || st.Reason != ReasonPrePullFailed {
			t.Fatalf("rollout = %+v, %v; want RolledBack for %s", st, err, ReasonPrePullFailed)
		}
		if !strings.Contains(st.Message, "pre-pull failed") || !strings.Contains(st.Message, imageMissing) {
			t.Errorf("message %q does not say the pull of %s failed", st.Message, imageMissing)
		}
		if after := fc.restarts(); mustJSON(after) != mustJSON(before) {
			t.Errorf("restart counts %v, want %v unchanged", after, before)
		}
		if left := fc.pullerPods(); len(left) > 0 {
			t.Errorf("%d puller pods outlive the rollback", len(left))
		}
	})
	t.Run("a driver without the puller image refuses", func(t *testing.T) {
		fc := prePullCluster(t, 2)
		spec := fc.spec(imageV2)
		spec.PrePull = true
		before := fc.snapshot()
		if _, _, err := fc.engine().Reconcile(context.Background(), spec, Status{}); err == nil || !strings.Contains(err.Error(), "pre-pull needs the image holding the puller binary") {
			t.Fatalf("Reconcile error %v, want pre-pull refused", err)
		}
		if fc.snapshot() != before {
			t.Error("a refused start wrote to the cluster")
		}
	})
}
