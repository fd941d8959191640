#!/usr/bin/env bash
# Builds the real control-plane binaries from the Go module proxy and links them into .dev/bin.
#
# Binaries live outside the clone, in a cache shared by every clone on the machine, so a fresh
# clone builds nothing. Each tool has a key of its own: a hash of its name, package, ldflags, the
# go.mod and go.sum of its module and, for a main of ours, its Go files, so changing one tool's
# module rebuilds only that tool (Prometheus alone takes minutes). The binary is
# TOOLS/NAME-KEY/NAME, keeping its file name.
#
# Usage: hack/tools/build.sh [TOOL...]   (default: every tool but those built on request)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/hack/tools"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

cache="${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout/tools"
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

# name | module directory under hack/tools | package (./DIR: a main of ours in that module) | ldflags
specs=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|-s -w"
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver|$k8s_ldflags"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager|$k8s_ldflags"
  "kubectl|.|k8s.io/kubernetes/cmd/kubectl|$k8s_ldflags"
  "kubelet|kubelet|k8s.io/kubernetes/cmd/kubelet|$k8s_ldflags"
  "prometheus|prometheus|github.com/prometheus/prometheus/cmd/prometheus|-s -w"
  "staticcheck|staticcheck|honnef.co/go/tools/cmd/staticcheck|-s -w"
  "rollouts-controller|argo-rollouts|github.com/argoproj/argo-rollouts/cmd/rollouts-controller|-s -w"
  "kubectl-argo-rollouts|argo-rollouts|./kubectl-argo-rollouts|-s -w"
  "tekton-controller|tekton|github.com/tektoncd/pipeline/cmd/controller|-s -w"
  "crane|crane|github.com/google/go-containerregistry/cmd/crane|-s -w"
  "helm|helm|helm.sh/helm/v4/cmd/helm|-s -w"
  "cyclonedx-gomod|cyclonedx|github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod|-s -w"
  "kubectl-krew|krew|sigs.k8s.io/krew/cmd/krew|-s -w"
  "validate-krew-manifest|krew|sigs.k8s.io/krew/cmd/validate-krew-manifest|-s -w"
)

# Built only when named: OpenKruise's kruise-manager, which only the benchmark runs, takes
# longer to build cold than the rest of make tools.
on_request=(
  "kruise-manager|kruise|github.com/openkruise/kruise|-s -w"
)

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

# key prints the cache key of one tool: what its binary is built from, including the Go files
# of a package of ours (./DIR), so that a change to our main rebuilds it.
key() { # name dir pkg ldflags
  {
    printf '%s\n' "$1" "$3" "$4"
    cat "$tools/$2/go.mod" "$tools/$2/go.sum"
    case "$3" in ./*) cat "$tools/$2/$3"/*.go ;; esac
  } | sha256sum | cut -c1-16
}

for w in "${want[@]}"; do
  for spec in "${on_request[@]}"; do
    [ "${spec%%|*}" = "$w" ] && specs+=("$spec")
  done
done

# When every selected tool is cached already, link them without waiting for the lock, which
# another clone's first build may hold for many minutes.
cached=true
for spec in "${specs[@]}"; do
  IFS='|' read -r name dir pkg ldflags <<<"$spec"
  selected "$name" || continue
  [ -x "$cache/$name-$(key "$name" "$dir" "$pkg" "$ldflags")/$name" ] || cached=false
done

# One build at a time per machine: parallel test packages all call this script.
if [ "$cached" = false ]; then
  exec 9>"$cache/.lock"
  flock 9
fi

for spec in "${specs[@]}"; do
  IFS='|' read -r name dir pkg ldflags <<<"$spec"
  selected "$name" || continue
  out="$cache/$name-$(key "$name" "$dir" "$pkg" "$ldflags")"
  if [ ! -x "$out/$name" ]; then
    echo "building $name (first build of these inputs on this machine; cached in $out)" >&2
    start=$(date +%s)
    mkdir -p "$out"
    (cd "$tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
    mv "$out/$name.tmp" "$out/$name"
    echo "built $name in $(( $(date +%s) - start ))s" >&2
  fi
  ln -sfn "$out/$name" "$root/.dev/bin/$name"
done
