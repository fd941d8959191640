// Package tekton holds the Tekton side of inplace-rollout: the catalog-style Task under task/, and
// the CustomRun controller in package customrun.
package tekton
