package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Plan is what a rollout of a spec would update now, batch by batch: computed as a start and
// progress compute it, with nothing written.
type Plan struct {
	// Target is the workload.
	Target workload.Ref
	// Batches are the spec's batches, each with the pods it updates, in update order.
	Batches []PlannedBatch
	// Already are the pods that run the images already: counted as updated before any batch.
	Already []string
	// Current are the images the named containers run now: the template's, or for
	// label-selected pods each distinct image with how many pods run it.
	Current map[string]string
	// Images are the images the pods would be patched to: each tag pinned to the digest its
	// registry serves now (TAG@DIGEST), or as given when not pinned.
	Images map[string]string
	// Resources are the resources the pods would be resized to, by container: only the values
	// named change.
	Resources map[string]inplace.Resources
}

// PlannedBatch is one batch of a Plan.
type PlannedBatch struct {
	// Upto is the number of pods updated once the batch is done, counting earlier batches and
	// the pods already on the images.
	Upto int
	// Pods are the pods the batch updates, in order.
	Pods []string
}

// Plan runs the checks a start runs before it writes (the spec, the workload's own state, the
// ports its hooks name, the batches, every pod's state annotation readable) and returns the
// batch each pod would be updated in. It writes nothing. Errors of type *InvalidError are bad
// input.
func (e *Engine) Plan(ctx context.Context, spec Spec) (Plan, error) {
	if err := spec.Validate(); err != nil {
		return Plan{}, err
	}
	// The Record too: a lock no version writes stops a plan as it stops a start.
	w, _, err := e.load(ctx, spec.Target)
	if err != nil {
		return Plan{}, err
	}
	if spec.TemplateOwned {
		if w, err = workload.Owned(w); err != nil {
			return Plan{}, err
		}
	}
	if err := w.CheckStart(spec.change(), spec.IncludeInit); err != nil {
		return Plan{}, err
	}
	if err := workload.CheckHookPorts(w, spec.Hooks); err != nil {
		return Plan{}, err
	}
	counts, err := ResolveBatches(spec.Batches, w.Replicas())
	if err != nil {
		return Plan{}, err
	}
	if err := checkStates(w); err != nil {
		return Plan{}, err
	}
	pin, err := e.pinTargets(ctx, spec, w, true)
	if err != nil {
		return Plan{}, err
	}
	return planOf(w, spec, counts, pin), nil
}

// planOf is the plan of a rollout of spec to the images pin pinned, over the batches ending at
// counts pods, from the workload as observed.
func planOf(w workload.Workload, spec Spec, counts []int, pin pinning) Plan {
	p := Plan{Target: w.Ref(), Current: currentImages(w, spec.Images), Images: pin.images, Resources: spec.Resources}
	var pending []string
	for _, pod := range w.Pods() {
		if pin.onContent(w, pod, spec.change()) {
			p.Already = append(p.Already, pod.Name)
		} else {
			pending = append(pending, pod.Name)
		}
	}
	for i, pods := range assignBatches(counts, len(p.Already), pending) {
		p.Batches = append(p.Batches, PlannedBatch{Upto: counts[i], Pods: pods})
	}
	return p
}

// assignBatches gives each batch, by the cumulative pod counts it ends at, the pending pods it
// updates: in the order given, which is the workload's update order (w.Pods()) that progress
// follows, once the already updated pods have filled what they count for.
func assignBatches(counts []int, already int, pending []string) [][]string {
	out := make([][]string, len(counts))
	done := already
	for i, upto := range counts {
		n := min(max(upto-done, 0), len(pending))
		if n > 0 {
			out[i], pending, done = pending[:n:n], pending[n:], done+n
		}
	}
	return out
}

// currentImages are the images the named containers run now: the template's, or for
// label-selected pods each distinct image with how many pods run it.
func currentImages(w workload.Observed, names map[string]string) map[string]string {
	if tmpl := w.Template(); tmpl != nil {
		return workload.TemplateImages(tmpl, names)
	}
	counts := map[string]map[string]int{}
	for _, p := range w.Pods() {
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				if _, ok := names[c.Name]; ok {
					if counts[c.Name] == nil {
						counts[c.Name] = map[string]int{}
					}
					counts[c.Name][c.Image]++
				}
			}
		}
	}
	out := map[string]string{}
	for name, images := range counts {
		if len(images) == 1 {
			for img := range images {
				out[name] = img
			}
			continue
		}
		var parts []string
		for img, n := range images {
			parts = append(parts, fmt.Sprintf("%s (%d pods)", img, n))
		}
		slices.Sort(parts)
		out[name] = strings.Join(parts, " | ")
	}
	return out
}
