package rollout

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Report is a workload's rollout as the cluster records it: the lock, and a row per pod.
type Report struct {
	// Target names the workload, as workload.Ref.String does.
	Target string      `json:"target"`
	Lock   *Record     `json:"rollout,omitempty"`
	Pods   []PodReport `json:"pods"`
}

// PodReport is one pod of a Report.
type PodReport struct {
	Name  string `json:"name"`
	Node  string `json:"node"`
	IP    string `json:"ip"`
	Ready bool   `json:"ready"`
	// RolloutID, Stage, Reason and Containers are the pod's state, when the lock's rollout (or
	// one it superseded) wrote it. Reason also says why a state is not shown.
	RolloutID  string                   `json:"rolloutID,omitempty"`
	Stage      inplace.Stage            `json:"stage,omitempty"`
	Reason     string                   `json:"reason,omitempty"`
	Containers []inplace.ContainerState `json:"containers,omitempty"`
	// Images are the images of every container of the pod's spec, init containers included.
	Images map[string]string `json:"images"`
}

// Report reads the workload's lock and its pods, in update order. It writes nothing. Errors of
// type *InvalidError are bad input (no such workload, a bad selector).
func (e *Engine) Report(ctx context.Context, ref workload.Ref) (Report, error) {
	w, lock, err := e.load(ctx, ref)
	if err != nil {
		return Report{}, err
	}
	r := Report{Target: ref.String(), Lock: lock}
	now := e.now()
	for _, p := range w.Pods() {
		r.Pods = append(r.Pods, PodRow(p, r.Lock, now))
	}
	return r, nil
}

// PodRow reports one pod, its stage as inplace.Judged at now. A state left by an earlier rollout
// than the lock's (and not one it superseded) is not this rollout's: the pod shows no stage, and
// the reason says whose it is.
func PodRow(p *corev1.Pod, lock *Record, now time.Time) PodReport {
	r := PodReport{Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, Images: map[string]string{}}
	r.Ready = inplace.PodReady(p)
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			r.Images[c.Name] = c.Image
		}
	}
	st, err := inplace.ReadState(p)
	switch {
	case err != nil:
		r.Reason = err.Error()
	case st == nil:
	case lock != nil && st.RolloutID != lock.RolloutID && !slices.Contains(lock.Superseded, st.RolloutID):
		r.Reason = fmt.Sprintf("last changed by an earlier rollout, %s (%s)", st.RolloutID, inplace.Judged(p, st, now))
	default:
		r.Stage, r.Reason = inplace.JudgedReason(p, st, now)
		r.RolloutID, r.Containers = st.RolloutID, st.Containers
		if r.Stage == inplace.StageUpdated {
			r.Containers = inplace.RanImageIDs(p, st)
		}
	}
	return r
}

// RolloutContainers are the containers that matter to the rollout on a pod without its state:
// those the lock's rollout changes (their images or resources), or every container when no
// rollout is recorded. Sorted.
func (r PodReport) RolloutContainers(lock *Record) []string {
	var names []string
	for name := range r.Images {
		if lock == nil {
			names = append(names, name)
		} else if _, ok := lock.Images[name]; ok {
			names = append(names, name)
		} else if _, ok := lock.Resources[name]; ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
