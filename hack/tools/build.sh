#!/usr/bin/env bash
# Builds the real control-plane binaries from the Go module proxy and links them into .dev/bin.
#
# Binaries live outside the clone, in a cache directory keyed by the tool modules (go.mod, go.sum)
# and this script, so every clone on a machine shares one build and a fresh clone builds nothing.
#
# Usage: hack/tools/build.sh [TOOL...]   (default: every tool)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/hack/tools"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

key=$(cd "$tools" && cat build.sh go.mod go.sum */go.mod */go.sum | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout/tools/$key"
mkdir -p "$cache" "$root/.dev/bin"

# Stamped so that version checks (Tekton's among them) see a real release.
k8s_ldflags="-s -w \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=34 \
 -X k8s.io/component-base/version.gitVersion=v1.34.5 \
 -X k8s.io/component-base/version.gitCommit=0000000000000000000000000000000000000000 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=34 \
 -X k8s.io/client-go/pkg/version.gitVersion=v1.34.5"

# name | module directory under hack/tools | package | ldflags
specs=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|-s -w"
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver|$k8s_ldflags"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager|$k8s_ldflags"
  "kubectl|.|k8s.io/kubernetes/cmd/kubectl|$k8s_ldflags"
  "prometheus|prometheus|github.com/prometheus/prometheus/cmd/prometheus|-s -w"
  "staticcheck|staticcheck|honnef.co/go/tools/cmd/staticcheck|-s -w"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

# One build at a time per machine: parallel test packages all call this script.
exec 9>"$cache/.lock"
flock 9

for spec in "${specs[@]}"; do
  IFS='|' read -r name dir pkg ldflags <<<"$spec"
  selected "$name" || continue
  if [ ! -x "$cache/$name" ]; then
    echo "building $name (first run on this machine; cached in $cache)" >&2
    start=$(date +%s)
    (cd "$tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$cache/$name.tmp" "$pkg")
    mv "$cache/$name.tmp" "$cache/$name"
    echo "built $name in $(( $(date +%s) - start ))s" >&2
  fi
  ln -sfn "$cache/$name" "$root/.dev/bin/$name"
done
