package main

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
)

// resourceUsage is how --requests and --limits take a value: kubectl set resources' value, after
// the container it is for, as --image takes CONTAINER=IMAGE.
const resourceUsage = "use CONTAINER=RESOURCE=QUANTITY[,RESOURCE=QUANTITY], e.g. app=cpu=200m,memory=64Mi"

// resourceNames are the resources --requests and --limits take: those a resize changes.
var resourceNames = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// resources is the container resources of --requests and --limits, or of --resources, nil when
// none is given. Each value is checked on its own, so that an error names the flag and the value
// it is in.
func (f *rolloutFlags) resources() (map[string]inplace.Resources, error) {
	given := len(f.requests)+len(f.limits) > 0
	if f.resourcesText != "" {
		if given {
			return nil, badInput("give --resources, or --requests and --limits, not both")
		}
		out := map[string]corev1.ResourceRequirements{}
		if err := v1alpha1.DecodeInto([]byte(f.resourcesText), &out); err != nil {
			return nil, badInput("--resources: %v", err)
		}
		if err := inplace.CheckResourceValues(out); err != nil {
			return nil, badInput("--resources: %v", err)
		}
		return out, nil
	}
	if !given {
		return nil, nil
	}
	out := map[string]inplace.Resources{}
	for _, part := range []struct {
		flag   string
		values []string
		set    func(r *inplace.Resources, l corev1.ResourceList)
	}{
		{"--requests", f.requests, func(r *inplace.Resources, l corev1.ResourceList) { r.Requests = l }},
		{"--limits", f.limits, func(r *inplace.Resources, l corev1.ResourceList) { r.Limits = l }},
	} {
		seen := map[string]bool{}
		for _, v := range part.values {
			name, list, err := parseResourceList(part.flag, v)
			if err != nil {
				return nil, err
			}
			if seen[name] {
				return nil, badInput("%s: container %q given twice: give its values in one %s %s=RESOURCE=QUANTITY,RESOURCE=QUANTITY", part.flag, name, part.flag, name)
			}
			seen[name] = true
			r := out[name]
			part.set(&r, list)
			out[name] = r
		}
	}
	return out, nil
}

// parseResourceList parses one value of flag (--requests or --limits):
// CONTAINER=RESOURCE=QUANTITY[,RESOURCE=QUANTITY].
func parseResourceList(flag, v string) (string, corev1.ResourceList, error) {
	name, values, ok := strings.Cut(v, "=")
	switch {
	case !ok || values == "":
		return "", nil, badInput("%s %q: %s", flag, v, resourceUsage)
	case name == "":
		return "", nil, badInput("%s %q: no container name before the first \"=\": %s", flag, v, resourceUsage)
	}
	list := corev1.ResourceList{}
	for _, pair := range strings.Split(values, ",") {
		res, qty, ok := strings.Cut(pair, "=")
		if !ok || res == "" || qty == "" {
			return "", nil, badInput("%s %q: %q is not RESOURCE=QUANTITY: %s", flag, v, pair, resourceUsage)
		}
		rn := corev1.ResourceName(res)
		if !slices.Contains(resourceNames, rn) {
			return "", nil, badInput("%s %q: %q: only cpu and memory change in place", flag, v, res)
		}
		if _, dup := list[rn]; dup {
			return "", nil, badInput("%s %q: %s given twice", flag, v, res)
		}
		q, err := resource.ParseQuantity(qty)
		if err != nil {
			return "", nil, badInput("%s %q: %s %q is not a quantity such as 250m, 1 or 64Mi", flag, v, res, qty)
		}
		if q.Sign() < 0 {
			return "", nil, badInput("%s %q: %s %s is below zero", flag, v, res, qty)
		}
		list[rn] = q
	}
	return name, list, nil
}

// overlayResources sets, over the file's resources, the values the flags give: --resources in
// place of the file's, --requests and --limits value by value, each container keeping the
// file's other values.
func overlayResources(file, flags map[string]inplace.Resources, replace bool) map[string]inplace.Resources {
	if replace {
		return flags
	}
	out := make(map[string]inplace.Resources, len(file)+len(flags))
	for name, r := range file {
		out[name] = *r.DeepCopy()
	}
	for name, r := range flags {
		have := out[name]
		inplace.Overlay(&have, r)
		out[name] = have
	}
	return out
}

// formatResources says resources as the flags take them: "app requests cpu=200m limits
// cpu=400m; sidecar requests memory=64Mi".
func formatResources(resources map[string]inplace.Resources) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		parts = append(parts, name+" "+inplace.DescribeResources(resources[name]))
	}
	return strings.Join(parts, "; ")
}
