// Package plugin serves the Argo Rollouts step plugin (inplace-rollout/step) and traffic router
// plugin (inplace-rollout/traffic) as thin adapters over pkg/rollout.
package plugin
