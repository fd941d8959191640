// Package integration holds the integration and end-to-end tests that run against a real local
// control plane (see the cluster and kubeletsim packages).
package integration
