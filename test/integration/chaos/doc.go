// Package chaos holds the tests (package chaos_test) that kill the inplace-rollout command at
// random points of rollouts and rollbacks, resume it, and check that the cluster ends where it
// should: every pod on the intended image, each container restarted once per direction, no pod
// recreated, the workload's strategy restored and its lock released.
package chaos
