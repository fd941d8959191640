// Package analysis gates a batch on Prometheus golden signals (error ratio, latency, traffic,
// saturation) with the measurement semantics of Argo Rollouts' AnalysisTemplate.
package analysis
