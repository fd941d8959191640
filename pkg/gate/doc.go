// Package gate is the readiness gate controller: it sets the inplace-rollout.io/ready condition
// True on pods that declare the gate and are not in the middle of an in-place update, so a pod
// template with the gate never leaves pods out of their Service (a pod whose template declares
// a readiness gate is not Ready until something sets the condition).
package gate
