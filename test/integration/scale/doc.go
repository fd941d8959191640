// Package scale holds the benchmarks (package scale_test) that measure rollouts of large
// workloads on the local control plane. They run only with -bench (make bench); without it no
// control plane starts.
package scale
