// Package e2e runs inplace-rollout on the real node (package realnode): the kubelet v1.34.5
// with containerd restarting real containers of the real app (package realnode/images). It is
// the only package that starts a real node, which one machine runs one at a time.
//
// `make test` runs its short form; INPLACE_ROLLOUT_REAL_NODE_SUITE=full (`make test-realnode`)
// runs every test. The run fails when the real node leaves the machine changed.
package e2e
