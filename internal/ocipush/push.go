// Package ocipush pushes the image index of an OCI image layout (what hack/image writes) to a
// registry, so that `make image PUSH=1` and the local control plane of `make cluster-up` put the
// same bytes where a kubelet can pull them.
package ocipush

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push writes the one image index of the layout at dir to ref (REPOSITORY:TAG) and returns the
// reference by digest (REPOSITORY@sha256:...), the form a Task, a chart or --puller-image pins.
// Credentials come from the Docker config of whoever runs it (authn.DefaultKeychain); a
// registry on a loopback address is spoken to over plain HTTP, as go-containerregistry does.
func Push(ctx context.Context, dir, ref string) (string, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("parsing the image reference %q: use REGISTRY/REPOSITORY:TAG: %w", ref, err)
	}
	idx, err := Index(dir)
	if err != nil {
		return "", err
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("reading the digest of the image in %s: %w", dir, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing the image in %s to %s: %w", dir, tag, err)
	}
	return tag.Context().Digest(digest.String()).String(), nil
}

// Index is the image index the layout at dir holds: hack/image writes exactly one.
func Index(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI image layout %s (make image writes it): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading %s/index.json: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading %s/index.json: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("the OCI image layout %s holds %d entries, not one image index: write it again with make image", dir, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("reading the image index %s in %s: %w", m.Manifests[0].Digest, dir, err)
	}
	return idx, nil
}
