package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// benchPod is a pod of the benchmark as the watch shows it: running image tag in container id,
// Ready or not, deleting or not.
func benchPod(name, uid, tag, containerID string, ready, deleting bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:" + tag}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", ImageID: "app@" + tag, ContainerID: containerID, Ready: ready,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}},
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(0, 0)}
	}
	return p
}

// A Deployment's recreate, as its watch shows it: each new pod, under a new name, is timed
// against the pod deleted first that nothing replaced yet; a StatefulSet's pod, back under its
// name, and a pod changed in place keep their own.
func TestPodClockSlots(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	type event struct {
		pod *corev1.Pod
		at  int
	}
	for _, tc := range []struct {
		name      string
		events    []event
		toReady   map[string]time.Duration
		recreated map[string]bool
		unmatched []string
	}{{
		name: "a Deployment recreates a, then b",
		events: []event{
			{benchPod("a", "ua", "v1", "c1", true, true), 1},
			{benchPod("x", "ux", "v2", "", false, false), 2},
			{benchPod("b", "ub", "v1", "c2", true, true), 3}, // not yet: x replaces a, not b
			{benchPod("x", "ux", "v2", "c3", true, false), 5},
			{benchPod("y", "uy", "v2", "", false, false), 6},
			{benchPod("a", "ua", "v1", "c1", false, true), 7}, // a's late events change nothing
			{benchPod("y", "uy", "v2", "c4", true, false), 10},
		},
		toReady:   map[string]time.Duration{"a": 4 * time.Second, "b": 7 * time.Second},
		recreated: map[string]bool{"a": true, "b": true},
	}, {
		name: "in place and a StatefulSet's pod under its name",
		events: []event{
			{benchPod("a", "ua", "v2", "c1", true, false), 1},
			{benchPod("a", "ua", "v2", "c3", true, false), 3},
			{benchPod("b", "ub", "v1", "c2", true, true), 4},
			{benchPod("b", "ub2", "v2", "c4", true, false), 9},
		},
		toReady:   map[string]time.Duration{"a": 2 * time.Second, "b": 5 * time.Second},
		recreated: map[string]bool{"b": true},
	}, {
		name:      "a new pod before any deletion has no slot",
		events:    []event{{benchPod("x", "ux", "v2", "", false, false), 1}},
		toReady:   map[string]time.Duration{},
		unmatched: []string{"x"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPodClock([]corev1.Pod{*benchPod("a", "ua", "v1", "c1", true, false), *benchPod("b", "ub", "v1", "c2", true, false)}, "v2")
			for _, e := range tc.events {
				c.observe(e.pod, at(e.at))
			}
			for slot, want := range tc.toReady {
				if got := c.done[slot].Sub(c.start[slot]); c.done[slot].IsZero() || got != want {
					t.Errorf("slot %s: change to Ready %s (done %v), want %s", slot, got, !c.done[slot].IsZero(), want)
				}
			}
			for slot, before := range c.before {
				if got := c.uid[slot] != before.UID; got != tc.recreated[slot] {
					t.Errorf("slot %s: recreated %v, want %v", slot, got, tc.recreated[slot])
				}
			}
			if len(c.unmatched) != len(tc.unmatched) || (len(c.unmatched) > 0 && c.unmatched[0] != tc.unmatched[0]) {
				t.Errorf("unmatched %v, want %v", c.unmatched, tc.unmatched)
			}
		})
	}
}

// A slot is out of the EndpointSlice from its old pod's leaving to its new pod's arrival, and a
// slot a pod has not claimed yet is counted out of nothing.
func TestEndpointClockSlots(t *testing.T) {
	pods := newPodClock([]corev1.Pod{*benchPod("a", "ua", "v1", "c1", true, false)}, "v2")
	eps := newEndpointClock(pods.slot)
	slice := func(ready map[string]bool) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}
		for name, r := range ready {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0." + name},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(r)}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: name}})
		}
		return s
	}
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	eps.observe(slice(map[string]bool{"a": true}), false, at(0))
	eps.reset()
	eps.observe(slice(map[string]bool{"a": false}), false, at(1))
	pods.observe(benchPod("a", "ua", "v1", "c1", false, true), at(1))
	eps.observe(slice(map[string]bool{"x": false}), false, at(2)) // x has no slot yet
	pods.observe(benchPod("x", "ux", "v2", "", false, false), at(2))
	if got := eps.readyCount(); got != 0 {
		t.Fatalf("%d slots ready while a is gone and x not ready, want 0", got)
	}
	eps.observe(slice(map[string]bool{"x": true}), false, at(6))
	if got, want := eps.out["a"], 5*time.Second; got != want {
		t.Errorf("slot a out %s, want %s", got, want)
	}
	if got := eps.readyCount(); got != 1 {
		t.Errorf("%d slots ready, want 1", got)
	}
	if got := eps.targets(); len(got) != 1 || got[0] != "10.0.0.x" {
		t.Errorf("targets %v, want [10.0.0.x]", got)
	}
}
