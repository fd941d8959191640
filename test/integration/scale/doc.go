// Package scale holds the benchmarks (package scale_test) of the Argo plugins' call latency
// and API cost on a 100-pod StatefulSet, of concurrent rollouts through one step plugin process,
// and of the plugin's path beside the CLI's. They run only with -bench (make bench); without it
// no control plane starts. Rollouts of large workloads, side by side with the other ways to roll
// an image out, are measured by test/integration/benchreport.
package scale
