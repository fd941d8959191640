package inplace

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Target is what a pod's containers should run.
type Target struct {
	// Images maps container names to images. Native sidecars (init containers with
	// restartPolicy Always) run beside the containers and restart on an image change as they
	// do, so Images may name them like containers.
	Images map[string]string
	// Resources maps container names (containers and native sidecars) to the CPU and memory
	// values they get, changed through the pod's resize subresource before any image.
	Resources map[string]Resources
	// IncludeInit lets Images name the other init containers too, which run once when a pod
	// starts: their new image takes effect at the pod's next start.
	IncludeInit bool
	// RolloutID identifies the rollout; Revision is the workload revision of the target.
	RolloutID string
	Revision  string
	// Labels and Annotations are set on the pod in the same write as the images, and put back
	// by a revert; an empty value removes the key.
	Labels, Annotations map[string]string
	// Hooks run around each pod's change (and its revert); the state records them.
	Hooks *Hooks
	// Supersedes lists earlier rollout IDs that this one replaces while in flight: a pod still
	// carrying their state keeps its BeforeImages, so a revert goes back to what the pod ran
	// before the first of them.
	Supersedes []string
}

// Change is one container whose image or resources change. A container whose image does not
// change has To equal to From; one whose resources do not change has no Resources.
type Change struct {
	Container string
	Init      bool
	From, To  string
	// Resources are the values the container's resources change to, FromResources what they
	// are now.
	FromResources, Resources *Resources
}

// Plan is the difference, in images and resources, between a pod and a target.
type Plan struct {
	// Changes lists the containers whose image or resources change, in pod spec order.
	Changes []Change
	// Unchanged lists the containers the target names that already run the target image with
	// the target resources.
	Unchanged []string
	// resources says the target names resources, not only images.
	resources bool
}

// NoOp reports whether nothing changes.
func (p Plan) NoOp() bool { return len(p.Changes) == 0 }

func (p Plan) String() string {
	if p.NoOp() {
		if p.resources {
			return fmt.Sprintf("no change: %s already on the target image and resources", strings.Join(p.Unchanged, ", "))
		}
		return fmt.Sprintf("no change: %s already on the target image", strings.Join(p.Unchanged, ", "))
	}
	parts := make([]string, 0, len(p.Changes))
	for _, c := range p.Changes {
		var what []string
		if c.From != c.To {
			what = append(what, fmt.Sprintf("%s -> %s", c.From, c.To))
		}
		if c.Resources != nil {
			what = append(what, fmt.Sprintf("%s -> %s", DescribeResources(*c.FromResources), DescribeResources(*c.Resources)))
		}
		parts = append(parts, fmt.Sprintf("%s: %s", c.Container, strings.Join(what, ", ")))
	}
	return strings.Join(parts, "; ")
}

// Diff computes which containers of pod change to reach target. An unknown container name, an
// init container other than a native sidecar without IncludeInit, an invalid image reference or
// resources CheckResources refuses is an error naming it.
func Diff(pod *corev1.Pod, target Target) (Plan, error) {
	if len(target.Images) > 0 || len(target.Resources) == 0 {
		if err := CheckImages(pod.Spec, target.Images, target.IncludeInit); err != nil {
			return Plan{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	if err := CheckResources(pod.Spec, target.Resources); err != nil {
		return Plan{}, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if _, ok := target.Annotations[StateAnnotation]; ok {
		return Plan{}, fmt.Errorf("pod %s/%s: annotation %s is the in-place update's own record; a rollout cannot set it", pod.Namespace, pod.Name, StateAnnotation)
	}
	plan := Plan{resources: len(target.Resources) > 0}
	for _, list := range []struct {
		containers []corev1.Container
		init       bool
	}{{pod.Spec.InitContainers, true}, {pod.Spec.Containers, false}} {
		for _, c := range list.containers {
			to, named := target.Images[c.Name]
			if !named || SameImage(c.Image, to) {
				to = c.Image
			}
			ch := Change{Container: c.Name, Init: list.init, From: c.Image, To: to}
			r, resized := target.Resources[c.Name]
			if resized && !HasResources(c.Resources, r) {
				from := ResourcesOf(c.Resources, r)
				ch.FromResources, ch.Resources = &from, r.DeepCopy()
			}
			switch {
			case ch.From != ch.To || ch.Resources != nil:
				plan.Changes = append(plan.Changes, ch)
			case named || resized:
				plan.Unchanged = append(plan.Unchanged, c.Name)
			}
		}
	}
	return plan, nil
}

// CheckImages checks images against a pod spec (a pod's, or a workload template's) without
// looking at what runs: each names a container of the spec or a native sidecar, another init
// container only with includeInit, and is a valid image reference. The error says which and why.
func CheckImages(spec corev1.PodSpec, images map[string]string, includeInit bool) error {
	if len(images) == 0 {
		return errors.New("no container images given")
	}
	var unknown []string
	for _, name := range slices.Sorted(maps.Keys(images)) {
		switch {
		case hasContainer(spec.Containers, name):
		case hasContainer(spec.InitContainers, name):
			if !includeInit && !NativeSidecar(*findContainer(spec.InitContainers, name)) {
				return fmt.Errorf("%q is an init container; init container images change only when asked for explicitly", name)
			}
		default:
			unknown = append(unknown, name)
			continue
		}
		if err := validateImage(images[name]); err != nil {
			return fmt.Errorf("container %q: %w", name, err)
		}
	}
	if len(unknown) > 0 {
		var have []string
		for _, c := range spec.Containers {
			have = append(have, c.Name)
		}
		return fmt.Errorf("no container named %s (its containers: %s)", quoteList(unknown), strings.Join(have, ", "))
	}
	return nil
}

func hasContainer(containers []corev1.Container, name string) bool {
	return findContainer(containers, name) != nil
}

func findContainer(containers []corev1.Container, name string) *corev1.Container {
	for i := range containers {
		if containers[i].Name == name {
			return &containers[i]
		}
	}
	return nil
}

// NativeSidecar reports whether the init container c is a native sidecar (restartPolicy Always):
// it keeps running beside the pod's containers, and the kubelet restarts it on an image change as
// it does a container, so its image changes in place like theirs.
func NativeSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// DiffSpecs compares a pod spec with a desired one (two workload templates, typically) and
// returns the images that change by container name. Any difference other than the images of
// containers and native sidecars (and of the other init containers when includeInit) is an
// error naming the first differing field.
func DiffSpecs(current, desired corev1.PodSpec, includeInit bool) (map[string]string, error) {
	images, _, err := diffSpecs(current, desired, includeInit, false)
	return images, err
}

// diffSpecs is DiffSpecs that, withResources, also takes the CPU and memory requests and limits
// of containers and native sidecars as changing in place: each value both specs declare and
// that differs is returned, by container, in resources. A value one spec declares and the other
// does not is an error: a resize cannot add one, nor remove it again.
func diffSpecs(current, desired corev1.PodSpec, includeInit, withResources bool) (map[string]string, map[string]Resources, error) {
	images := map[string]string{}
	resources := map[string]Resources{}
	normalized := *desired.DeepCopy()
	align := func(field string, cur, want []corev1.Container, allowed func(corev1.Container) bool) error {
		if len(cur) != len(want) {
			return fmt.Errorf("%s: %d containers, want %d: containers cannot be added or removed in place", field, len(cur), len(want))
		}
		for i := range want {
			if cur[i].Name != want[i].Name {
				return fmt.Errorf("%s[%d].name: %q, want %q: containers cannot be renamed or reordered in place", field, i, cur[i].Name, want[i].Name)
			}
			if withResources {
				r, err := resourceChange(field, i, cur[i], want[i])
				if err != nil {
					return err
				}
				if r != nil {
					resources[want[i].Name] = *r
				}
			}
			if cur[i].Image == want[i].Image {
				continue
			}
			if !allowed(want[i]) {
				return fmt.Errorf("%s[%d].image (container %q): %q -> %q: init container images change only when asked for explicitly", field, i, want[i].Name, cur[i].Image, want[i].Image)
			}
			if err := validateImage(want[i].Image); err != nil {
				return fmt.Errorf("%s[%d].image (container %q): %w", field, i, want[i].Name, err)
			}
			images[want[i].Name] = want[i].Image
			want[i].Image = cur[i].Image
		}
		return nil
	}
	// A container that stops or starts being a native sidecar is not an image change: the
	// restartPolicy differs, and the comparison below names it.
	initAllowed := func(c corev1.Container) bool { return includeInit || NativeSidecar(c) }
	if err := align("spec.initContainers", current.InitContainers, normalized.InitContainers, initAllowed); err != nil {
		return nil, nil, err
	}
	if err := align("spec.containers", current.Containers, normalized.Containers, func(corev1.Container) bool { return true }); err != nil {
		return nil, nil, err
	}
	if !equality.Semantic.DeepEqual(current, normalized) {
		what := "only container images"
		if withResources {
			what = "only container images and CPU and memory values"
		}
		return nil, nil, fmt.Errorf("%s differs: %s can change in place", firstDifference(current, normalized), what)
	}
	if len(resources) > 0 {
		if err := CheckResources(current, resources); err != nil {
			return nil, nil, fmt.Errorf("spec.%w", err)
		}
	}
	return images, resources, nil
}

// resourceChange compares the CPU and memory values of the i-th container of field in two specs
// (cur and want, of one name) and returns those of want that differ, nil for none, aligning
// want's values to cur's so that any other difference shows. A value only one of them declares
// is an error naming it.
func resourceChange(field string, i int, cur corev1.Container, want corev1.Container) (*Resources, error) {
	var out Resources
	for _, part := range []struct {
		name      string
		cur, want corev1.ResourceList
		set       *corev1.ResourceList
	}{{"requests", cur.Resources.Requests, want.Resources.Requests, &out.Requests}, {"limits", cur.Resources.Limits, want.Resources.Limits, &out.Limits}} {
		for _, name := range resizable {
			c, inCur := part.cur[name]
			w, inWant := part.want[name]
			switch {
			case inCur != inWant:
				verb := "adds"
				if inCur {
					verb = "removes"
				}
				return nil, fmt.Errorf("%s[%d].resources.%s.%s (container %q): the template %s it, and a resize changes only the values a container has", field, i, part.name, name, want.Name, verb)
			case !inCur || c.Cmp(w) == 0:
				continue
			}
			if *part.set == nil {
				*part.set = corev1.ResourceList{}
			}
			(*part.set)[name] = w.DeepCopy()
			part.want[name] = c.DeepCopy()
		}
	}
	if len(out.Requests)+len(out.Limits) == 0 {
		return nil, nil
	}
	return &out, nil
}

// TemplateChange is what changes, in place, from one pod template to another: container images,
// and pod labels and annotations, which are mutable on a live pod (an env var fed from them by
// the downward API sees the new values when its container restarts on the new image).
type TemplateChange struct {
	// Images maps container names to their new images.
	Images map[string]string
	// Resources maps container names to the CPU and memory values that change, as the desired
	// template has them.
	Resources map[string]Resources
	// Labels and Annotations map keys to their new values; a removed key maps to nil.
	Labels, Annotations map[string]*string
}

// DiffTemplates compares two workload templates, the one a pod runs and the desired one, and
// returns what changes in place: images (as DiffSpecs), the CPU and memory values of containers
// and native sidecars (through the pods' resize subresource; CheckResources's rules), labels and
// annotations. Any other difference (env, command, volumes, probes, ...) is an error naming the
// first differing field, as a JSON path under the template.
func DiffTemplates(current, desired corev1.PodTemplateSpec, includeInit bool) (TemplateChange, error) {
	images, resources, err := diffSpecs(current.Spec, desired.Spec, includeInit, true)
	if err != nil {
		return TemplateChange{}, fmt.Errorf("template.%w", err)
	}
	cur, want := current.ObjectMeta, desired.ObjectMeta
	cur.Labels, cur.Annotations, want.Labels, want.Annotations = nil, nil, nil, nil
	if !equality.Semantic.DeepEqual(cur, want) {
		return TemplateChange{}, errors.New("template.metadata differs beyond labels and annotations: only container images, labels and annotations can change in place")
	}
	return TemplateChange{Images: images, Resources: resources, Labels: mapChanges(current.Labels, desired.Labels),
		Annotations: mapChanges(current.Annotations, desired.Annotations)}, nil
}

// mapChanges maps each key whose value differs from current to desired to its desired value,
// nil when desired lacks it.
func mapChanges(current, desired map[string]string) map[string]*string {
	out := map[string]*string{}
	for k, v := range desired {
		if cv, ok := current[k]; !ok || cv != v {
			out[k] = &v
		}
	}
	for k := range current {
		if _, ok := desired[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

// firstDifference names the first field, as a JSON path under spec, where a and b differ.
func firstDifference(a, b corev1.PodSpec) string {
	var ma, mb any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	if p := walkDifference(ma, mb, "spec"); p != "" {
		return p
	}
	return "spec"
}

func walkDifference(a, b any, path string) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return path
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			if p := walkDifference(av[k], bv[k], path+"."+k); p != "" {
				return p
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return path
		}
		for i := range av {
			if p := walkDifference(av[i], bv[i], fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a, b) {
			return path
		}
		return ""
	}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
