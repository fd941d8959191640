// Package plugin is for the Argo Rollouts step plugin (inplace-rollout/step) and traffic router
// plugin (inplace-rollout/traffic), thin adapters over pkg/rollout. The step plugin is in plugin/step,
// the traffic router in plugin/traffic.
package plugin

// The client rate limit of a plugin process, shared by every Rollout it drives: client-go's
// default of 5 requests/s would throttle even one rollout of a hundred pods to a sixth of its
// pace. Argo's own controller defaults to 40 and 80.
const (
	ClientQPS   = 50
	ClientBurst = 100
)
