// Package chaos holds the tests (package chaos_test) that kill the drivers (the inplace-rollout
// command, the Argo plugin process, our Tekton controller) at random points of rollouts and
// rollbacks, restart the control plane, write the objects concurrently, and delete and scale
// the workload under a rollout, then check that the cluster ends where it should: every pod on
// the intended image, each container restarted once per direction, no pod recreated by us, the
// workload's strategy restored and its lock released.
package chaos
