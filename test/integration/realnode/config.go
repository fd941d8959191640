package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// containerdConfig is containerd 1.6's configuration: every path under the node's directory,
// the CRI plugin with runc on cgroupfs, the sandbox image and registry from the local registry.
// restrict_oom_score_adj: this VM's root lacks CAP_SYS_RESOURCE, and without it runc fails every
// sandbox on the -998 score the kubelet asks for the pause container.
const containerdConfig = `version = 2
root = "{{dir}}/containerd/root"
state = "{{dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{{dir}}/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{{dir}}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{{dir}}/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{dir}}/certs.d"
`

// hostsConfig makes containerd pull from the local registry over plain HTTP on loopback.
const hostsConfig = `server = "http://{{registry}}"

[host."http://{{registry}}"]
  capabilities = ["pull", "resolve"]
`

// cniConfig is the pods' network: the bridge plugin on the bridge Start made, without gateway
// (pods get no default route), masquerade or forwarding, and host-local addresses whose
// leases live under the node's directory.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "inplace-rollout",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{bridge}}",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{subnet}}", "gateway": "{{gateway}}"}]],
        "dataDir": "{{dir}}/cni-leases"
      }
    }
  ]
}
`

// kubeletConfig is the kubelet's configuration for this VM (reference: real-node.md): cgroupfs
// on cgroup v1, no swap check, no node-allocatable enforcement or local-storage isolation, no
// read-only port, healthz on loopback, every directory under the node's. Pods' DNS goes to the
// bridge address, where nothing answers: with no nameserver at all, containerd would copy the
// machine's, and a pod's lookup would leave the machine. It serves with a
// certificate it signs itself, which kube-apiserver does not verify here. The apiserver is
// authenticated by the cluster CA and allowed everything; no one else can reach the kubelet.
// protectKernelDefaults is false, so the kubelet sets three sysctls; undo puts them back.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{gateway}}
port: {{port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{healthz}}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {{ca}}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /{{cgroupRoot}}
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
protectKernelDefaults: false
containerRuntimeEndpoint: unix://{{dir}}/containerd.sock
resolvConf: {{dir}}/resolv.conf
podLogsDir: {{dir}}/pod-logs
volumePluginDir: {{dir}}/volume-plugins
staticPodPath: ""
clusterDomain: cluster.local
clusterDNS: [{{gateway}}]
serializeImagePulls: false
maxPods: 150
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
nodeStatusReportFrequency: 10s
`

// render fills a template's {{name}} fields.
func render(tmpl string, vals map[string]string) string {
	pairs := make([]string, 0, 2*len(vals))
	for k, v := range vals {
		pairs = append(pairs, "{{"+k+"}}", v)
	}
	return strings.NewReplacer(pairs...).Replace(tmpl)
}

// writeConfigs writes containerd's, the registry's, CNI's and the kubelet's configuration under
// dir.
func writeConfigs(dir string, vals map[string]string) error {
	files := map[string]string{
		"containerd.toml":         containerdConfig,
		"cni/10-inplace.conflist": cniConfig,
		"kubelet.yaml":            kubeletConfig,
		"resolv.conf":             "nameserver {{gateway}}\n",
	}
	if vals["registry"] != "" {
		files[filepath.Join("certs.d", vals["registry"], "hosts.toml")] = hostsConfig
	}
	for name, tmpl := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
		}
		if err := os.WriteFile(p, []byte(render(tmpl, vals)), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return nil
}
