package traffic

import (
	argov1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
)

// SetHeaderRoute is refused: the pods are updated in place, so there is no second set of pods a
// header could route to.
func (p *Plugin) SetHeaderRoute(*argov1alpha1.Rollout, *argov1alpha1.SetHeaderRoute) types.RpcError {
	return types.RpcError{ErrorString: Name + " does not support header routes (setHeaderRoute): pods are updated in place, there is no second set of pods to route to"}
}

// SetMirrorRoute is refused, as SetHeaderRoute is.
func (p *Plugin) SetMirrorRoute(*argov1alpha1.Rollout, *argov1alpha1.SetMirrorRoute) types.RpcError {
	return types.RpcError{ErrorString: Name + " does not support mirror routes (setMirrorRoute): pods are updated in place, there is no second set of pods to route to"}
}

// RemoveManagedRoutes has nothing to remove: the plugin manages no routes.
func (p *Plugin) RemoveManagedRoutes(*argov1alpha1.Rollout) types.RpcError {
	return types.RpcError{}
}
