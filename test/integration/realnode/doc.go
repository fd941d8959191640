// Package realnode runs one real Kubernetes node on this machine beside the kubelet simulator:
// Debian's containerd 1.6, runc and CNI plugins, and the kubelet v1.34.5 built by hack/tools,
// registered with a local kube-apiserver. An image patch there restarts a real container in place,
// which is what the simulator imitates (docs/conformance.md compares them).
//
// Everything it starts lives under one directory, except what the kubelet and containerd write
// at fixed paths (the device-plugin socket, /run/containerd/s, /var/run/netns, the cgroups) and
// three sysctls the kubelet sets. Before it changes the machine it records what was there in a
// file of its own (the record), and Stop, or Cleanup after a crash, puts the machine back from
// that record: processes, mounts, the bridge, cgroups, paths and sysctls.
//
// The pods' network is a bridge that the node creates with the gateway address on it, the CNI
// bridge plugin without gateway or masquerade, and no ip_forward: pods reach the host's bridge
// address and each other, and nothing leaves the machine.
//
// Only one real node runs on a machine at a time (those fixed paths would collide): Start waits
// for a machine-wide lock, which Stop releases.
package realnode
