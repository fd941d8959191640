// Package registry resolves image tags to the digests their registries serve now, with the pull
// credentials a kubelet would use for the pods that run them: the pods' imagePullSecrets and
// those of their ServiceAccounts (go-containerregistry's authn/kubernetes). A rollout pins its
// target to that digest, so every batch gets the same content even when the tag is pushed again,
// and a revert knows whether a tag still names the content a pod ran.
package registry
