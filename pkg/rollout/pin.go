package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// pinning is what the registry said of a rollout's target images when it started.
type pinning struct {
	// images are the images pods are patched to, by container: TAG@DIGEST for a tag resolved,
	// else as given.
	images map[string]string
	// digests are the digests the tags resolved to, by container.
	digests map[string]string
	// unresolved says, by container, why a tag was left as given (pin-digests auto).
	unresolved map[string]error
	// current are the digests of tags left as given because every pod, and the template, run
	// them as that digest already: respelling them would restart pods for nothing.
	current map[string]string
}

// pinMode is the spec's pin-digests mode, auto when unset.
func (s Spec) pinMode() string {
	if s.TemplateOwned {
		// The pods run the template's images as its owner spelled them.
		return PinNever
	}
	if s.PinDigests == "" {
		return PinAuto
	}
	return s.PinDigests
}

// pinTargets resolves each target tag to the digest its registry serves now, with the pull
// credentials of the workload's pods, so that every batch, every resumed run and every pod
// recreated from the template gets that content even when the tag is pushed again. Under
// auto, a registry that does not answer, or wants credentials the pods do not have, leaves the
// tag as given; credentials the registry refuses, a tag it does not have, or, at the start
// (atStart), pods already on a tag whose content cannot be checked are bad input. Mid-rollout (a
// rollout superseded, say back to the images the pods run) the pods' content is the rollout's
// own doing, and the tag goes on unpinned. Nothing is written.
func (e *Engine) pinTargets(ctx context.Context, spec Spec, w workload.Workload, atStart bool) (pinning, error) {
	p := pinning{images: maps.Clone(spec.Images), digests: map[string]string{}, unresolved: map[string]error{}, current: map[string]string{}}
	mode := spec.pinMode()
	if mode == PinNever || len(spec.Images) == 0 {
		// A rollout of resources alone has no tag to pin.
		return p, nil
	}
	if e.Registry == nil {
		if mode == PinAlways {
			return p, invalid("%s: pin-digests always, but this driver has no access to registries to resolve the images; give them by digest (IMAGE@sha256:...)", w.Ref())
		}
		return p, nil
	}
	session := e.Registry.For(w.Ref().Namespace, w.Pods())
	for _, name := range slices.Sorted(maps.Keys(spec.Images)) {
		img := spec.Images[name]
		if inplace.DigestOf(img) != "" {
			continue
		}
		digest, err := session.Digest(ctx, img)
		if err == nil && runsContent(w, name, img, digest) {
			p.current[name] = digest
			continue
		}
		if err == nil {
			p.images[name], p.digests[name] = img+"@"+digest, digest
			continue
		}
		var re *registry.Error
		errors.As(err, &re)
		switch {
		case mode == PinAlways:
			return p, invalid("%s: container %q: %v. pin-digests is always, so nothing was changed: make the registry answer with the pods' pull credentials, or give the image by digest (IMAGE@sha256:...)", w.Ref(), name, err)
		case re != nil && re.Refused():
			return p, invalid("%s: container %q: %v: the registry refused the pods' pull credentials, so the kubelet would too. Nothing was changed; fix the pods' imagePullSecrets (or their ServiceAccount's)", w.Ref(), name, err)
		case re != nil && re.NotFound():
			return p, invalid("%s: container %q: %v: the registry has no such image. Nothing was changed; push it, or correct the image", w.Ref(), name, err)
		}
		p.unresolved[name] = err
	}
	if len(p.unresolved) > 0 && atStart {
		if err := checkUnresolvedTags(w, spec.Images, p.unresolved); err != nil {
			return p, err
		}
	}
	return p, nil
}

// checkUnresolvedTags refuses a rollout to a tag that could not be resolved while pods already
// run that tag, when the rollout would leave them as they are on content it cannot check: some
// pods run the tag and others are to pull it now, perhaps as other content; or every pod runs
// every target already, and the rollout would report success with nothing restarted. A
// container that every pod runs on its target while others change is the rollout's to leave
// alone (a sidecar listed with the rest), as it was.
func checkUnresolvedTags(w workload.Observed, images map[string]string, unresolved map[string]error) error {
	pods := w.Pods()
	allThere := true
	for _, p := range pods {
		for name, img := range images {
			allThere = allThere && runsImage(p, name, img)
		}
	}
	tags := observeTagDigests(pods, images)
	for _, name := range slices.Sorted(maps.Keys(unresolved)) {
		var on []string
		for _, p := range pods {
			if runsImage(p, name, images[name]) {
				on = append(on, p.Name)
			}
		}
		if len(on) == 0 || (len(on) == len(pods) && !allThere) {
			continue
		}
		runs := "no digest reported yet"
		if len(tags[name]) > 0 {
			runs = describeDigests(tags[name])
		}
		return &InvalidError{Fix: FixPinNever, Msg: fmt.Sprintf("%s: pods %s already run %s=%s, as %s, and the tag could not be resolved to check whether it names other content now (%v). Nothing was changed; give the image by digest (IMAGE@sha256:...) to say which content to run, or make the registry answer",
			w.Ref(), strings.Join(firstN(on, 5), ", "), name, images[name], runs, unresolved[name])}
	}
	return nil
}

// runsContent reports whether the template (if any) and every pod run container name as image,
// each pod reporting digest: a container the rollout leaves as it is (a sidecar listed with
// the rest, say).
func runsContent(w workload.Observed, name, image, digest string) bool {
	if tmpl := w.Template(); tmpl != nil && !workload.TemplateHasImages(tmpl, map[string]string{name: image}) {
		return false
	}
	pods := w.Pods()
	for _, p := range pods {
		if !runsImage(p, name, image) || digestReported(p, name) != digest {
			return false
		}
	}
	return len(pods) > 0
}

// runsImage reports whether the pod's container name is spelled image.
func runsImage(p *corev1.Pod, name, image string) bool {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if c.Name == name && inplace.SameImage(image, c.Image) {
				return true
			}
		}
	}
	return false
}

// onContent reports whether the pod runs the target content already, with the target resources:
// each container spelled the pinned way, or spelled as the tag with the digest the tag resolved
// to reported. given is the spec's target, its images as given.
func (p pinning) onContent(w workload.Workload, pod *corev1.Pod, given workload.Change) bool {
	if w.Counted(pod, workload.Change{Images: p.images, Resources: given.Resources}, nil) {
		return true
	}
	if !w.Counted(pod, given, nil) {
		return false
	}
	for name, d := range p.digests {
		if digestReported(pod, name) != d {
			return false
		}
	}
	return true
}

// warnUnresolved says once, in the log, which tags a rollout goes on with unpinned, and why.
func (e *Engine) warnUnresolved(ref workload.Ref, id string, images map[string]string, unresolved map[string]error) {
	for _, name := range slices.Sorted(maps.Keys(unresolved)) {
		e.logFor(ref, id).Warn("image not pinned to a digest: pods get the tag, whatever content it names when each pulls it",
			"container", name, "image", images[name], "why", unresolved[name].Error())
	}
}

// tagMoved answers, for a revert, whether a tag still resolves to the digest a pod ran, with the
// pull credentials of pods; nil without registry access. The answers hold for one step.
func (e *Engine) tagMoved(ctx context.Context, namespace string, pods []*corev1.Pod) inplace.TagMoved {
	if e.Registry == nil {
		return nil
	}
	session := e.Registry.For(namespace, pods)
	return func(image, beforeImageID string) (bool, bool) {
		d, err := session.Digest(ctx, image)
		if err != nil {
			return false, false
		}
		return d != inplace.DigestOf(beforeImageID), true
	}
}

// stillPinned reports whether the images of a rollout that succeeded are still what its tags
// name: a rollout pinned to digests is done only while the tags resolve to them. A tag that
// cannot be resolved now counts as unmoved.
func (e *Engine) stillPinned(ctx context.Context, spec Spec, w workload.Workload, lock *Record) bool {
	if e.Registry == nil || spec.pinMode() == PinNever {
		return true
	}
	var session *registry.Session
	for name, img := range spec.Images {
		pinned := lock.Images[name]
		if pinned == img || inplace.DigestOf(pinned) == "" {
			continue
		}
		if session == nil {
			session = e.Registry.For(w.Ref().Namespace, w.Pods())
		}
		if d, err := session.Digest(ctx, img); err == nil && d != inplace.DigestOf(pinned) {
			return false
		}
	}
	return true
}

// stillApplied reports whether every pod's spec still has the target's images (as spelled) and
// resources for the containers that name them: what a rollout that succeeded left, unless
// someone changed it since.
func stillApplied(pods []*corev1.Pod, target workload.Change) bool {
	images := target.Images
	for _, p := range pods {
		if !workload.Runs(p, workload.Change{Resources: target.Resources}) {
			return false
		}
		for _, list := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for _, c := range list {
				if img, ok := images[c.Name]; ok && c.Image != img {
					return false
				}
			}
		}
	}
	return true
}

// unpinned are the images of given that were not pinned to a digest: the tags pods may run as
// different content.
func (p pinning) unpinned(given map[string]string) map[string]string {
	out := map[string]string{}
	for name, img := range given {
		if _, ok := p.digests[name]; !ok {
			out[name] = img
		}
	}
	return out
}

// describePinned says which digest each pinned tag names, e.g. `app=reg/app:v2 as sha256:1a2b...`.
func describePinned(digests, images map[string]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(digests)) {
		parts = append(parts, fmt.Sprintf("%s=%s as %s", name, images[name], digests[name]))
	}
	return strings.Join(parts, ", ")
}

// checked are the digests the registry confirmed for the tags: pinned, or run already.
func (p pinning) checked() map[string]string {
	out := maps.Clone(p.current)
	maps.Copy(out, p.digests)
	return out
}
