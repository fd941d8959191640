// Package benchreport measures one image rollout of a workload of N pods done each way a user
// could do it, side by side on a local control plane, repeated and interleaved, every driver at
// one rate limit (then, on a second one, each component at its own default), and writes the report
// docs/benchmarks.md with its plots: inplace-rollout's batches in place, the floor (the same
// image patches by a loop with no safety), the native StatefulSet and Deployment rolling
// updates (pods deleted and recreated), and OpenKruise's CloneSet in-place update when its
// manager is built. hack/benchreport is its command; `make bench` runs it.
package benchreport
