// Package rollout holds the tests (package rollout_test) that run the inplace-rollout command
// against real workload controllers.
package rollout
