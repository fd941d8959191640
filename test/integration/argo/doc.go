// Package argo holds the end-to-end tests of the Argo Rollouts plugins against the real Argo
// Rollouts controller (v1.10.1) on the local control plane: the plugin binary registered by
// file:// with its sha256, the controller authenticated as its ServiceAccount bound only to
// Argo's stock ClusterRole and config/argo's, and abort and promote through the real
// kubectl-argo-rollouts. After the tests, the calls that ServiceAccount made, from the
// apiserver's audit log, are checked against config/argo/clusterrole.yaml.
package argo
