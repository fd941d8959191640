// Package task holds the catalog-style Tekton Task (inplace-rollout/0.1), whose step runs the
// inplace-rollout command, and the tests that check it with Tekton's own types.
package task
