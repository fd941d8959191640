#!/usr/bin/env bash
# Prints FILE (config/argo/argo-rollouts-config.yaml, or config/argo/helm-values.yaml for Argo's
# Helm chart) with both plugins' location set to URL/BINARY and their sha256 to BINARY's line of
# dist/checksums.txt, for `kubectl apply` or `helm upgrade -f` after a release.
#
# Usage: hack/argo-config.sh URL [ARCH [FILE]]   (ARCH: amd64, the default, or arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:?usage: hack/argo-config.sh URL [ARCH [FILE]]}
file=${3:-config/argo/argo-rollouts-config.yaml}
bin=inplace-rollout-linux-${2:-amd64}
sum=$(awk -v b="$bin" '$2 == b { print $1 }' dist/checksums.txt)
if [ -z "$sum" ]; then
  echo "dist/checksums.txt has no line for $bin: run make release first" >&2
  exit 1
fi
# Each plugin entry's location line gets the binary's address, and a sha256 line after it.
awk -v loc="${url%/}/$bin" -v sum="$sum" '
  /^      location: / { print "      location: " loc; print "      sha256: " sum; next }
  { print }
' "$file"
