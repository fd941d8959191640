package step

import (
	"context"
	"fmt"

	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// withTemplateResources returns ro with its pod template's container resources as the API
// server has them. Argo hands the Rollout to the plugin through gob, which keeps a quantity's
// format but drops its value (its fields are unexported): every cpu and memory the template
// declares arrives as 0, and fromRollout would resize the pods to that. Only a template that
// declares resources is read again; without a client of Rollouts (a test's plugin) ro is
// returned as it is. The Rollout read must be the one of the call, same UID and generation:
// another generation is for a later call to take.
func (p *Plugin) withTemplateResources(ro *argov1alpha1.Rollout) (*argov1alpha1.Rollout, error) {
	if ro == nil || !declaresResources(ro.Spec.Template.Spec) {
		return ro, nil
	}
	cl, err := p.clients.Get()
	if err != nil {
		return nil, err
	}
	if cl.Rollouts == nil {
		return ro, nil
	}
	ctx, cancel := context.WithTimeout(p.ctx, eventTimeout)
	defer cancel()
	fresh, err := cl.Rollouts.ArgoprojV1alpha1().Rollouts(ro.Namespace).Get(ctx, ro.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Rollout %s/%s for the cpu and memory of its template: %w", ro.Namespace, ro.Name, err)
	}
	if fresh.UID != ro.UID || fresh.Generation != ro.Generation {
		return nil, fmt.Errorf("the Rollout %s/%s changed since Argo called (generation %d, now %d): the next call takes the new one", ro.Namespace, ro.Name, ro.Generation, fresh.Generation)
	}
	out := ro.DeepCopy()
	copyResources(out.Spec.Template.Spec.Containers, fresh.Spec.Template.Spec.Containers)
	copyResources(out.Spec.Template.Spec.InitContainers, fresh.Spec.Template.Spec.InitContainers)
	return out, nil
}

// declaresResources reports whether any container of spec declares a request or a limit. The
// names survive gob, as map keys.
func declaresResources(spec corev1.PodSpec) bool {
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			if len(c.Resources.Requests)+len(c.Resources.Limits) > 0 {
				return true
			}
		}
	}
	return false
}

// copyResources gives each container of to the resources of from's container of the same name.
func copyResources(to, from []corev1.Container) {
	for i := range to {
		for _, f := range from {
			if f.Name == to[i].Name {
				to[i].Resources = *f.Resources.DeepCopy()
			}
		}
	}
}
