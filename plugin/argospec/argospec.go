// Package argospec reads what the Argo Rollouts plugins are given, a Rollout and a plugin config,
// into the engine's Spec: one reading for the step plugin and the traffic router alike.
package argospec

import (
	"encoding/json"
	"errors"
	"fmt"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/strictdecode"
)

// Config is a plugin's config: the rollout spec, and FromRollout to take the images and the
// container resources from the Rollout's own pod template instead of Images and Resources.
type Config struct {
	v1alpha1.InPlaceRolloutSpec `json:",inline"`
	// FromRollout takes the image of every container and native sidecar (init container with
	// restartPolicy Always) of the Rollout's pod template, and of its other init containers
	// when includeInit is set, for the target's container of the same name. Without
	// includeInit, those other init containers must already run the template's images on the
	// target: one that would change is refused, rather than left undone. For the step plugin
	// (Decode) it takes as well the cpu and memory requests and limits the template's
	// containers and native sidecars declare (TemplateResources).
	FromRollout bool `json:"fromRollout,omitempty"`
}

// Request is a decoded call: the Rollout it came from and the engine's Spec for it.
type Request struct {
	// Rollout is NS/NAME, for messages and logs.
	Rollout string
	// Holder is argo:NS/NAME, the lock's holder for this Rollout.
	Holder string
	// Spec is the rollout to run, in the Rollout's namespace.
	Spec rollout.Spec
	// Canonical is the config as the engine reads it (images resolved), to tell one config from
	// another.
	Canonical string
	// Initial: the Rollout has no stable revision yet (its first creation); there is nothing to
	// roll out in place.
	Initial bool
}

// HolderPrefix starts the lock holder of every Argo Rollout.
const HolderPrefix = "argo:"

// Holder is the lock holder of a Rollout.
func Holder(ro *argov1alpha1.Rollout) string { return HolderPrefix + ro.Namespace + "/" + ro.Name }

// Decode reads raw, the config found at field (such as "steps[].plugin.config"), for the Rollout
// ro, the step plugin's way: fromRollout takes the template's images and its cpu and memory. Its
// error is bad input naming the Rollout and the field; nothing is written for it. Argo passes the
// Rollout through gob, which drops zero values: nothing here relies on one.
func Decode(ro *argov1alpha1.Rollout, raw json.RawMessage, field string) (Request, error) {
	return decode(ro, raw, field, true)
}

// DecodeImagesFromRollout is Decode for the traffic router: fromRollout takes the template's
// images alone. The router's sentinel pod runs from that template, so its resources are the
// sentinel's (tiny, by our advice), not the target's.
func DecodeImagesFromRollout(ro *argov1alpha1.Rollout, raw json.RawMessage, field string) (Request, error) {
	return decode(ro, raw, field, false)
}

// decode is Decode; fromRollout takes the template's resources too when withResources.
func decode(ro *argov1alpha1.Rollout, raw json.RawMessage, field string, withResources bool) (Request, error) {
	if ro == nil {
		return Request{}, errors.New("the call carries no Rollout")
	}
	name := ro.Namespace + "/" + ro.Name
	req := Request{Rollout: name, Holder: Holder(ro), Initial: ro.Status.StableRS == ""}
	if len(raw) == 0 || string(raw) == "null" {
		return req, fmt.Errorf("%s of Rollout %s is empty: give the rollout spec (target, images, resources or fromRollout, batches)", field, name)
	}
	var c Config
	var keep map[string]string
	if err := v1alpha1.DecodeInto(raw, &c); err != nil {
		if errors.Is(err, strictdecode.ErrEmpty) {
			return req, fmt.Errorf("%s of Rollout %s is empty: give the rollout spec (target, images, resources or fromRollout, batches)", field, name)
		}
		return req, fmt.Errorf("%s of Rollout %s: %w", field, name, err)
	}
	if c.FromRollout {
		if len(c.Images) > 0 {
			return req, fmt.Errorf("%s of Rollout %s: images and fromRollout both given: keep one", field, name)
		}
		if len(c.Resources) > 0 {
			return req, fmt.Errorf("%s of Rollout %s: resources and fromRollout both given: keep one (fromRollout takes the cpu and memory of the Rollout's template)", field, name)
		}
		c.Images, keep = TemplateImages(ro, c.IncludeInit)
		if len(c.Images) == 0 {
			return req, fmt.Errorf("%s of Rollout %s: fromRollout is set but spec.template of the Rollout has no containers", field, name)
		}
		if withResources {
			c.Resources = TemplateResources(ro)
		}
	}
	spec, err := rollout.FromV1alpha1(&c.InPlaceRolloutSpec, rollout.Caller{Namespace: ro.Namespace, Holder: req.Holder, HolderUID: ro.UID})
	if err != nil {
		return req, fmt.Errorf("%s of Rollout %s: %w", field, name, err)
	}
	spec.Keep = keep
	canonical, err := json.Marshal(struct {
		v1alpha1.InPlaceRolloutSpec `json:",inline"`
		Keep                        map[string]string `json:"keep,omitempty"`
	}{c.InPlaceRolloutSpec, keep})
	if err != nil {
		return req, fmt.Errorf("%s of Rollout %s: %w", field, name, err)
	}
	req.Spec, req.Canonical = spec, string(canonical)
	return req, nil
}

// TemplateResources maps the names of the containers and native sidecars of ro's pod template
// to the cpu and memory requests and limits each declares; a container that declares neither
// is not named, and other resources (ephemeral-storage, extended resources) are not taken.
//
// The target gets these values in place wherever its pods' differ, and its pods already on them
// are not resized. They are not compared with the target's template here: the rollout itself
// writes them into a held StatefulSet's or DaemonSet's template, so a config taken as the
// difference would change from one call to the next and supersede its own rollout. The values
// are a function of the Rollout's template alone, as its images are. Plain init containers,
// which run once and cannot be resized, are left out.
func TemplateResources(ro *argov1alpha1.Rollout) map[string]inplace.Resources {
	var out map[string]inplace.Resources
	take := func(c corev1.Container) {
		r := inplace.Resources{Requests: cpuMemory(c.Resources.Requests), Limits: cpuMemory(c.Resources.Limits)}
		if len(r.Requests)+len(r.Limits) == 0 {
			return
		}
		if out == nil {
			out = map[string]inplace.Resources{}
		}
		out[c.Name] = r
	}
	for _, c := range ro.Spec.Template.Spec.Containers {
		take(c)
	}
	for _, c := range ro.Spec.Template.Spec.InitContainers {
		if rollout.NativeSidecar(c) {
			take(c)
		}
	}
	return out
}

// cpuMemory is the cpu and memory of l, nil when it has neither.
func cpuMemory(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[name]; ok {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// TemplateImages maps the names of the containers and native sidecars (init containers with
// restartPolicy Always) of ro's pod template to their images, and those of its other init
// containers too when includeInit. Without includeInit, keep maps those other init containers to
// their images: the rollout leaves them alone, and they must already run them (Spec.Keep).
// Native sidecars run beside the containers and the kubelet restarts them on an image change as
// it does the containers, so a new image of theirs is rolled out like any other.
func TemplateImages(ro *argov1alpha1.Rollout, includeInit bool) (images, keep map[string]string) {
	images = map[string]string{}
	for _, c := range ro.Spec.Template.Spec.Containers {
		images[c.Name] = c.Image
	}
	for _, c := range ro.Spec.Template.Spec.InitContainers {
		switch {
		case includeInit || rollout.NativeSidecar(c):
			images[c.Name] = c.Image
		default:
			if keep == nil {
				keep = map[string]string{}
			}
			keep[c.Name] = c.Image
		}
	}
	return images, keep
}
