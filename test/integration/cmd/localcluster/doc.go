// Command localcluster runs the local control plane in the foreground until it gets SIGTERM or
// SIGINT: etcd, kube-apiserver, kube-controller-manager, the kubelet simulator and Prometheus,
// and with -argo-plugin the Argo Rollouts controller with that binary registered as its plugins.
// `make cluster-up` (ARGO=1 for Argo) starts it in the background; `make cluster-down` stops it.
//
// Once everything is ready it writes DIR/env (KUBECONFIG, PROMETHEUS_URL, KUBELETSIM_URL and
// PATH), so `. DIR/env` points kubectl at the cluster. Each process has a PID file DIR/NAME.pid.
package main
