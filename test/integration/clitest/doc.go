// Package clitest runs the inplace-rollout command against a test control plane, and creates
// the workloads the command's tests roll out.
package clitest
