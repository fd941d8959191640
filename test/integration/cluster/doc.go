// Package cluster starts a real local Kubernetes control plane for tests and for `make cluster-up`:
// etcd, kube-apiserver and kube-controller-manager built from the Go module proxy (hack/tools),
// the kubelet simulator in-process, and optionally a real Prometheus scraping the simulator's
// metrics. Everything listens on free loopback ports and is stopped by Stop.
package cluster
