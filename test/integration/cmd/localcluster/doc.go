// Command localcluster runs the local control plane in the foreground until it gets SIGTERM or
// SIGINT: etcd, kube-apiserver, kube-controller-manager, the kubelet simulator and Prometheus.
// `make cluster-up` starts it in the background; `make cluster-down` stops it.
//
// Once everything is ready it writes DIR/env (KUBECONFIG, PROMETHEUS_URL, KUBELETSIM_URL and
// PATH), so `. DIR/env` points kubectl at the cluster. Each process has a PID file DIR/NAME.pid.
package main
