// Package tekton holds the integration tests that run the real Tekton Pipelines controller
// against the local control plane.
package tekton
