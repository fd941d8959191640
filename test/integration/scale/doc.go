// Package scale holds the benchmarks (package scale_test) of the Argo plugins' call latency
// and API cost on a 100-pod StatefulSet. They run only with -bench (make bench); without it no
// control plane starts. Rollouts of large workloads, side by side with the other ways to roll
// an image out, are measured by test/integration/benchreport.
package scale
