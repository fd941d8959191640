// Package analysis holds the tests (package analysis_test) of analysis-gated rollouts against
// the real Prometheus of the local control plane, which requires basic auth here so that
// credentials are exercised.
package analysis
