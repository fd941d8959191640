// Command localcluster runs the local control plane in the foreground until it gets SIGTERM or
// SIGINT: etcd, kube-apiserver, kube-controller-manager, the kubelet simulator, an OCI registry
// (in this process; -registry=false leaves it out) and Prometheus,
// with -argo-plugin the Argo Rollouts controller with that binary registered as its plugins, and
// with -tekton the Tekton Pipelines controller and that binary's tekton-controller (config/tekton).
// `make cluster-up` (ARGO=1 for Argo, TEKTON=1 for Tekton) starts it in the background;
// `make cluster-down` stops it.
//
// Once everything is ready it writes DIR/env (KUBECONFIG, PROMETHEUS_URL, KUBELETSIM_URL,
// REGISTRY and PATH), so `. DIR/env` points kubectl at the cluster. Each process has a PID file DIR/NAME.pid.
package main
