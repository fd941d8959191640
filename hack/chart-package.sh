#!/usr/bin/env bash
# Packages charts/inplace-rollout for a release into OUT: its image pinned to DIGEST, the digest
# of the image the same `make release` built, its appVersion VERSION and its version VERSION as a
# semantic version without the v (as the krew manifest writes it: v0.0.0-2edb11d for a commit).
#
#   hack/chart-package.sh OUT DIGEST VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 3 ]; then
  echo "usage: hack/chart-package.sh OUT DIGEST VERSION" >&2
  exit 2
fi
out=$1 digest=$2 version=$3
if ! [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "hack/chart-package.sh: \"$digest\" is not an image digest (sha256: and 64 hex digits); make image writes it to dist/image.digest" >&2
  exit 2
fi
semver=$(go run ./hack/krewmanifest -version "$version" -print-version)

hack/tools/build.sh helm >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -L: the chart's files/ links to config/, whose roles and dashboard it ships.
cp -RL charts/inplace-rollout "$tmp/inplace-rollout"
values=$tmp/inplace-rollout/values.yaml
sed -i -E "s/^  digest: \"\"$/  digest: \"$digest\"/" "$values"
if ! grep -q "^  digest: \"$digest\"$" "$values"; then
  echo "hack/chart-package.sh: charts/inplace-rollout/values.yaml has no image.digest \"\" to pin" >&2
  exit 1
fi
mkdir -p "$out"
HELM_CACHE_HOME=$tmp/helm HELM_CONFIG_HOME=$tmp/helm HELM_DATA_HOME=$tmp/helm \
  .dev/bin/helm package "$tmp/inplace-rollout" --version "${semver#v}" --app-version "$version" --destination "$out"
