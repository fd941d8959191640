package workload

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// Change is what a rollout sets on a workload's containers, by name: their images, and their CPU
// and memory values (only the values named; the others stay). Either may be empty, not both.
// The template, the pods and the lock carry the two together, so that a template judged to have
// a rollout's target, a pod counted as updated, and a workload handed back all agree on both.
type Change struct {
	Images    map[string]string            `json:"images,omitempty"`
	Resources map[string]inplace.Resources `json:"resources,omitempty"`
}

// Images is a Change of images alone.
func Images(images map[string]string) Change { return Change{Images: images} }

// IsZero reports whether the change names no container.
func (c Change) IsZero() bool { return len(c.Images) == 0 && len(c.Resources) == 0 }

// TemplateChange returns, of the template's containers that ch names, their images and, of
// their resources, the values ch names: what a rollout to ch changes them from.
func TemplateChange(tmpl *corev1.PodTemplateSpec, ch Change) Change {
	return Change{Images: TemplateImages(tmpl, ch.Images), Resources: specResources(tmpl.Spec, ch.Resources)}
}

// specResources returns, of the spec's containers that resources names, the values it names.
func specResources(spec corev1.PodSpec, resources map[string]inplace.Resources) map[string]inplace.Resources {
	if len(resources) == 0 {
		return nil
	}
	out := map[string]inplace.Resources{}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			if r, ok := resources[c.Name]; ok {
				out[c.Name] = inplace.ResourcesOf(c.Resources, r)
			}
		}
	}
	return out
}

// hasResources reports whether the spec's containers that resources names have its values, by
// quantity (0.5 and 500m are one value).
func hasResources(spec corev1.PodSpec, resources map[string]inplace.Resources) bool {
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			if r, ok := resources[c.Name]; ok && !inplace.HasResources(c.Resources, r) {
				return false
			}
		}
	}
	return true
}

// TemplateHas reports whether the template's containers that ch names have its images, however
// each reference is spelled, and its resources, by quantity.
func TemplateHas(tmpl *corev1.PodTemplateSpec, ch Change) bool {
	return TemplateHasImages(tmpl, ch.Images) && hasResources(tmpl.Spec, ch.Resources)
}

// Runs reports whether the pod spec has ch: its images, however each reference is spelled, and
// its resources, by quantity.
func Runs(pod *corev1.Pod, ch Change) bool {
	return RunsImages(pod, ch.Images) && hasResources(pod.Spec, ch.Resources)
}

// checkResources refuses resources the template (or, for label-selected pods, a pod) cannot be
// resized to in place: see inplace.CheckResources.
func checkResources(w Observed, resources map[string]inplace.Resources) error {
	if len(resources) == 0 {
		return nil
	}
	return checkSpecs(w, w.Ref().String(), func(spec corev1.PodSpec) error { return inplace.CheckResources(spec, resources) })
}

// checkSpecs runs check on the workload's pod template, or, for label-selected pods, on each
// pod's spec, and returns its first refusal as an InvalidError naming the template (as tmpl
// says it) or the pod.
func checkSpecs(w Observed, tmpl string, check func(corev1.PodSpec) error) error {
	if t := w.Template(); t != nil {
		if err := check(t.Spec); err != nil {
			return &InvalidError{Msg: fmt.Sprintf("%s: %v", tmpl, err)}
		}
		return nil
	}
	for _, pod := range w.Pods() {
		if err := check(pod.Spec); err != nil {
			return &InvalidError{Msg: fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err)}
		}
	}
	return nil
}

// CheckHookPorts refuses hooks whose HTTP call names a port (by name) that the workload's
// template, or for label-selected pods a pod, does not declare: every pod's call would fail
// without being made, failing the rollout's first batch.
func CheckHookPorts(w Observed, hooks *inplace.Hooks) error {
	if hooks == nil {
		return nil
	}
	return checkSpecs(w, fmt.Sprintf("%s (its pod template)", w.Ref()), func(spec corev1.PodSpec) error {
		if err := inplace.CheckHookPorts(spec, hooks); err != nil {
			return fmt.Errorf("%w; name a port a container declares, or give the port's number", err)
		}
		return nil
	})
}

// CheckLockResources refuses resources, recorded in a lock's field, that no version writes (a
// person edited them): a container without a name, a resource other than CPU or memory, a value
// below zero, a limit below its request.
func CheckLockResources(field string, resources map[string]inplace.Resources) error {
	for _, c := range slices.Sorted(maps.Keys(resources)) {
		if c == "" {
			return fmt.Errorf("%s has an empty container name", field)
		}
	}
	if err := inplace.CheckResourceValues(resources); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}
