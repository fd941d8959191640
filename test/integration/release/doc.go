// Package release tests what `make release` ships for krew: the archives hack/archive writes,
// the manifest hack/krewmanifest writes (checked by krew's own validate-krew-manifest and
// installed by krew itself), and the binary run by kubectl as the plugin `kubectl inplace-rollout`.
package release
