package inplace

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNextAdoptRecordsAPodSoARevertTakesItBack(t *testing.T) {
	beforeID := "reg.example/app@sha256:" + strings.Repeat("1", 64)
	a := Adoption{RolloutID: "r1", Images: map[string]string{"app": "reg.example/app:v1"},
		ImageIDs: map[string]string{"app": beforeID}, Labels: map[string]string{"rev": "old"}}

	pod := testPod() // created from the new template: app on v2, at revision "new"
	pod.Spec.Containers[0].Image = "reg.example/app:v2"
	pod.Labels = map[string]string{"rev": "new"}
	s, err := NextAdopt(pod, a, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Patch == nil || s.Stage != StageUpdated {
		t.Fatalf("step = %+v, want a write of stage Updated", s)
	}
	adopted := apply(t, pod, s)
	st := mustState(t, adopted)
	if len(st.Containers) != 1 || st.Containers[0].BeforeImage != "reg.example/app:v1" || st.Containers[0].BeforeImageID != beforeID ||
		st.Containers[0].AfterImage != "reg.example/app:v2" || st.Labels["rev"] != (LabelChange{Before: "old", After: "new"}) {
		t.Fatalf("state = %+v", st)
	}
	if adopted.Spec.Containers[0].Image != "reg.example/app:v2" {
		t.Errorf("adopting changed the image to %s", adopted.Spec.Containers[0].Image)
	}

	s, err = NextRevert(adopted, Options{}, t0.Add(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	reverted := apply(t, adopted, s)
	if got := reverted.Spec.Containers[0].Image; got != "reg.example/app@sha256:"+strings.Repeat("1", 64) {
		t.Errorf("revert image %s, want the digest pods on v1 ran", got)
	}
	if reverted.Labels["rev"] != "old" {
		t.Errorf("revert label rev=%s, want old", reverted.Labels["rev"])
	}
}

func TestNextAdoptLeavesPodsAloneThatNeedNothingOrAreBusy(t *testing.T) {
	a := Adoption{RolloutID: "r1", Images: map[string]string{"app": "reg.example/app:v1"}}
	s, err := NextAdopt(testPod(), a, t0) // already on v1
	if err != nil || s.Patch != nil || !s.Done {
		t.Errorf("pod on the previous image: step %+v, err %v; want done, no write", s, err)
	}

	busy := testPod()
	busy.Spec.Containers[0].Image = "reg.example/app:v2"
	// Its status still shows the container the update replaces.
	st := &State{RolloutID: "other", Stage: StageUpdating, StageAt: t0, Containers: []ContainerState{{Name: "app", BeforeImage: "reg.example/app:v0",
		BeforeImageID: busy.Status.ContainerStatuses[0].ImageID, AfterImage: "reg.example/app:v2"}}}
	busy.Annotations = map[string]string{StateAnnotation: st.encode()}
	_, err = NextAdopt(busy, a, t0)
	var ie *IneligibleError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), `rollout "other" is updating it`) {
		t.Errorf("pod mid-update: err %v, want it refused naming the other rollout", err)
	}

	// The kubelet acted on that update: its new container runs, not Ready. The update is over
	// (Over): the pod is down, not busy, and is adopted.
	st.Containers[0].FromContainerID = busy.Status.ContainerStatuses[0].ContainerID
	busy.Annotations = map[string]string{StateAnnotation: st.encode()}
	runsV2(busy, t0)
	busy.Status.ContainerStatuses[0].Ready = false
	s, err = NextAdopt(busy, a, t0.Add(time.Second))
	if err != nil || s.Patch == nil || s.Stage != StageUpdated {
		t.Errorf("pod whose other update took, not Ready: step %+v, err %v; want it adopted", s, err)
	}
}
