package inplace

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/util/qos"
)

// Resources are the CPU and memory requests and limits a rollout sets on one container: only
// the values named change, and the container keeps the others. A pod's resources change through
// its resize subresource (KEP-1287), which the kubelet applies to the running container, with a
// restart only where the container's resizePolicy says RestartContainer for a changed resource.
type Resources = corev1.ResourceRequirements

// resizable are the resources a resize can change.
var resizable = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// CheckResources checks resources (by container) against a pod spec, a pod's or a workload
// template's, before anything is written. Each must name a container or a native sidecar (an
// init container that runs once cannot be resized), set only CPU and memory, only values the
// container already declares (the resize API refuses to remove one again, so a rollback could
// not), no limit below its request, and leave the pod's QoS class as it is (the API refuses a
// resize that changes it). The error names the container and the value.
func CheckResources(spec corev1.PodSpec, resources map[string]Resources) error {
	if len(resources) == 0 {
		return nil
	}
	if spec.Resources != nil && len(spec.Resources.Requests)+len(spec.Resources.Limits) > 0 {
		return errors.New("the pod declares pod-level resources, and a pod with them cannot be resized: remove the resources from the rollout")
	}
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		c := findContainer(spec.Containers, name)
		if c == nil {
			if c = findContainer(spec.InitContainers, name); c == nil {
				return fmt.Errorf("resources: no container named %q (its containers: %s)", name, containerNames(spec))
			}
			if !NativeSidecar(*c) {
				return fmt.Errorf("resources: %q is an init container that runs once; only containers and native sidecars are resized in place", name)
			}
		}
		if err := checkContainerResources(c, resources[name]); err != nil {
			return fmt.Errorf("resources of container %q: %w", name, err)
		}
	}
	before := qos.ComputePodQOS(&corev1.Pod{Spec: spec})
	resized := *spec.DeepCopy()
	SetResources(&resized, resources)
	if after := qos.ComputePodQOS(&corev1.Pod{Spec: resized}); after != before {
		return fmt.Errorf("resources: the pod's QoS class would change from %s to %s, which a resize cannot do: %s", before, after, qosHint(before))
	}
	return nil
}

// qosHint says how to keep a QoS class.
func qosHint(class corev1.PodQOSClass) string {
	if class == corev1.PodQOSGuaranteed {
		return "keep every container's requests equal to its limits (change both together)"
	}
	return "keep requests below limits in at least one container"
}

// CheckResourceValues checks resources without a pod spec: each names a container, sets only
// CPU and memory, no value below zero, and no limit below the request it gives with it. The
// error names the container and the value.
func CheckResourceValues(resources map[string]Resources) error {
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		if name == "" {
			return errors.New("resources: an entry has no container name")
		}
		if err := checkValues(resources[name]); err != nil {
			return fmt.Errorf("resources of container %q: %w", name, err)
		}
	}
	return nil
}

func checkValues(r Resources) error {
	if len(r.Claims) > 0 {
		return errors.New("claims cannot change in place")
	}
	if len(r.Requests)+len(r.Limits) == 0 {
		return errors.New("names no request or limit")
	}
	for _, part := range []struct {
		field string
		list  corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for _, name := range slices.Sorted(maps.Keys(part.list)) {
			q := part.list[name]
			switch {
			case !slices.Contains(resizable, name):
				return fmt.Errorf("%s.%s: only cpu and memory change in place", part.field, name)
			case q.Sign() < 0:
				return fmt.Errorf("%s.%s %s is below zero", part.field, name, q.String())
			}
		}
	}
	for _, name := range resizable {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if hasReq && hasLim && lim.Cmp(req) < 0 {
			return fmt.Errorf("%s limit %s is below its request %s", name, lim.String(), req.String())
		}
	}
	return nil
}

// checkContainerResources checks one container's target resources against what it declares.
func checkContainerResources(c *corev1.Container, r Resources) error {
	if err := checkValues(r); err != nil {
		return err
	}
	for _, part := range []struct {
		field      string
		want, have corev1.ResourceList
	}{{"requests", r.Requests, c.Resources.Requests}, {"limits", r.Limits, c.Resources.Limits}} {
		for _, name := range slices.Sorted(maps.Keys(part.want)) {
			if _, ok := part.have[name]; !ok {
				return fmt.Errorf("%s.%s: the container declares no %s %s, and a rollout changes only the values a container has (a resize cannot remove one again on rollback): add it to the template first", part.field, name, name, strings.TrimSuffix(part.field, "s"))
			}
		}
	}
	merged := *c.DeepCopy()
	setContainerResources(&merged, r)
	for _, name := range resizable {
		req, hasReq := merged.Resources.Requests[name]
		lim, hasLim := merged.Resources.Limits[name]
		if hasReq && hasLim && lim.Cmp(req) < 0 {
			return fmt.Errorf("%s limit %s is below its request %s", name, lim.String(), req.String())
		}
	}
	return nil
}

// SetResources sets resources on the spec's containers and native sidecars (a template being
// finalized, or a pod spec to compare): each value named replaces the container's, and the
// others stay.
func SetResources(spec *corev1.PodSpec, resources map[string]Resources) {
	for name, r := range resources {
		if c := findContainer(spec.Containers, name); c != nil {
			setContainerResources(c, r)
		} else if c := findContainer(spec.InitContainers, name); c != nil {
			setContainerResources(c, r)
		}
	}
}

func setContainerResources(c *corev1.Container, r Resources) { Overlay(&c.Resources, r) }

// Overlay sets on have each value r names, keeping have's others: how a template, a pod spec or
// a spec file's resources take a rollout's.
func Overlay(have *corev1.ResourceRequirements, r Resources) {
	for _, part := range []struct {
		have *corev1.ResourceList
		set  corev1.ResourceList
	}{{&have.Requests, r.Requests}, {&have.Limits, r.Limits}} {
		if len(part.set) == 0 {
			continue
		}
		if *part.have == nil {
			*part.have = corev1.ResourceList{}
		}
		maps.Copy(*part.have, part.set)
	}
}

// HasResources reports whether every value r names is the container's, by quantity (100m and
// 0.1 are one value).
func HasResources(have corev1.ResourceRequirements, r Resources) bool {
	return listHas(have.Requests, r.Requests) && listHas(have.Limits, r.Limits)
}

func listHas(have, want corev1.ResourceList) bool {
	for name, q := range want {
		h, ok := have[name]
		if !ok || h.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// ResourcesOf returns, of the container's resources, the values r names: what a rollout to r
// changes them from.
func ResourcesOf(have corev1.ResourceRequirements, r Resources) Resources {
	var out Resources
	pick := func(have, want corev1.ResourceList) corev1.ResourceList {
		if len(want) == 0 {
			return nil
		}
		l := corev1.ResourceList{}
		for name := range want {
			if q, ok := have[name]; ok {
				l[name] = q.DeepCopy()
			}
		}
		return l
	}
	out.Requests, out.Limits = pick(have.Requests, r.Requests), pick(have.Limits, r.Limits)
	return out
}

// restartsOnResize reports whether the kubelet restarts the container to apply a change from
// before to after: its resizePolicy says RestartContainer for a resource whose value changes.
// A resource with no policy is resized as NotRequired, the kubelet's default.
func restartsOnResize(c *corev1.Container, before, after Resources) bool {
	for _, p := range c.ResizePolicy {
		if p.RestartPolicy != corev1.RestartContainer {
			continue
		}
		if changed(before.Requests, after.Requests, p.ResourceName) || changed(before.Limits, after.Limits, p.ResourceName) {
			return true
		}
	}
	return false
}

func changed(before, after corev1.ResourceList, name corev1.ResourceName) bool {
	a, ok := after[name]
	if !ok {
		return false
	}
	b, ok := before[name]
	return !ok || b.Cmp(a) != 0
}

// DescribeResources says r as kubectl set resources takes its values: "requests
// cpu=200m,memory=64Mi limits cpu=400m", quantities canonical (0.5 as 500m). Every message and
// report of resources says them so.
func DescribeResources(r Resources) string {
	var parts []string
	for _, part := range []struct {
		field string
		list  corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		if len(part.list) == 0 {
			continue
		}
		var vals []string
		for _, name := range slices.Sorted(maps.Keys(part.list)) {
			q := part.list[name]
			vals = append(vals, fmt.Sprintf("%s=%s", name, q.String()))
		}
		parts = append(parts, part.field+" "+strings.Join(vals, ","))
	}
	return strings.Join(parts, " ")
}

func containerNames(spec corev1.PodSpec) string {
	var have []string
	for _, c := range spec.Containers {
		have = append(have, c.Name)
	}
	for _, c := range spec.InitContainers {
		if NativeSidecar(c) {
			have = append(have, c.Name)
		}
	}
	return strings.Join(have, ", ")
}
