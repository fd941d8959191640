// Package images builds the container images of the real node (a real kubelet and containerd
// beside the kubelet simulator) and pushes them to the local OCI registry, with no Docker: the
// app images REGISTRY/app:TAG, whose program (test/integration/cmd/realapp) behaves by its tag
// as the simulator's images do; the sandbox image REGISTRY/pause:3.10
// (test/integration/cmd/pause); and the puller image that pre-pull's puller pods copy their
// binary from (cmd/puller at /usr/local/bin/puller).
//
// Compile builds the programs once, static, for linux and this machine's architecture; every
// image is one layer with fixed file times and owners and a config with the epoch as its
// creation time, so the same source and Go version give the same digests on every run. The
// app images differ only in their config's APP_TAG, which gives each tag its own digest.
package images
