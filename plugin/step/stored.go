package step

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// storedReadTimeout bounds the read of a Rollout from the API server within a call.
const storedReadTimeout = 10 * time.Second

// withStoredResources returns ro with the resources of its pod template's containers as the API
// server stores them, when the step's config takes them (fromRollout) and the template declares
// any. Argo hands a plugin the Rollout through gob, which keeps nothing of a resource.Quantity
// (its fields are unexported): every cpu and memory value arrives as 0. The Rollout is read
// again, at the generation Argo called with; a newer one is an error, as a call about a revision
// that is no longer the Rollout's (Argo calls again).
func (p *Plugin) withStoredResources(ro *argov1alpha1.Rollout, c *types.RpcStepContext) (*argov1alpha1.Rollout, error) {
	if ro == nil || c == nil || !takesTemplate(c.Config) || !declaresResources(ro.Spec.Template.Spec) {
		return ro, nil
	}
	cl, err := p.clients.Get()
	if err != nil {
		return nil, err
	}
	if cl.Rollouts == nil {
		return nil, fmt.Errorf("the resources of the template of Rollout %s/%s cannot be read: the plugin has no Rollouts client", ro.Namespace, ro.Name)
	}
	ctx, cancel := context.WithTimeout(p.ctx, storedReadTimeout)
	defer cancel()
	stored, err := cl.Rollouts.ArgoprojV1alpha1().Rollouts(ro.Namespace).Get(ctx, ro.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Rollout %s/%s for its template's resources: %w", ro.Namespace, ro.Name, err)
	}
	if stored.UID != ro.UID || stored.Generation != ro.Generation {
		return nil, fmt.Errorf("the Rollout %s/%s changed since this call began (generation %d, now %d): its template's resources are taken at the next call", ro.Namespace, ro.Name, ro.Generation, stored.Generation)
	}
	out := ro.DeepCopy()
	copyResources(out.Spec.Template.Spec.Containers, stored.Spec.Template.Spec.Containers)
	copyResources(out.Spec.Template.Spec.InitContainers, stored.Spec.Template.Spec.InitContainers)
	return out, nil
}

// takesTemplate reports whether a step config takes its rollout from the Rollout's template.
func takesTemplate(raw json.RawMessage) bool {
	var c struct {
		FromRollout bool `json:"fromRollout"`
	}
	return json.Unmarshal(raw, &c) == nil && c.FromRollout
}

// declaresResources reports whether any container of spec declares requests or limits: whether
// gob may have zeroed values the config takes.
func declaresResources(spec corev1.PodSpec) bool {
	for _, list := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range list {
			if len(c.Resources.Requests)+len(c.Resources.Limits) > 0 {
				return true
			}
		}
	}
	return false
}

// copyResources gives each container of to the resources of the container of the same name in
// from.
func copyResources(to, from []corev1.Container) {
	for i := range to {
		for _, f := range from {
			if f.Name == to[i].Name {
				to[i].Resources = *f.Resources.DeepCopy()
			}
		}
	}
}
