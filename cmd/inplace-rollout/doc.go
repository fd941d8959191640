// Command inplace-rollout updates the container images of live pods in place, batch by batch,
// gated on Prometheus golden signals, and puts every touched pod back on its exact previous
// image when a batch fails.
package main
