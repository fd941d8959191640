// Package scale holds the benchmarks (package scale_test) that measure rollouts of large
// workloads on the local control plane, and the Argo plugins' call latency and API cost on a
// 100-pod StatefulSet. They run only with -bench (make bench); without it no control plane
// starts.
package scale
