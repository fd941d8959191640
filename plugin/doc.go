// Package plugin is for the Argo Rollouts step plugin (inplace-rollout/step) and traffic router
// plugin (inplace-rollout/traffic), thin adapters over pkg/rollout. The step plugin is in plugin/step,
// the traffic router in plugin/traffic.
package plugin
