package inplace

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// validateImage checks that ref is a valid image reference.
func validateImage(ref string) error {
	if ref == "" {
		return fmt.Errorf("image is empty")
	}
	if strings.TrimSpace(ref) != ref {
		return fmt.Errorf("image %q has leading or trailing whitespace", ref)
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("image %q is not a valid reference: %w", ref, err)
	}
	return nil
}

// normalizeImage returns the canonical form of an image reference or a kubelet imageID:
// docker.io/library/ prefixed, :latest added to an untagged name, docker-pullable:// and other
// runtime prefixes removed. Unparsable input is returned as is.
func normalizeImage(ref string) string {
	if i := strings.Index(ref, "://"); i >= 0 {
		ref = ref[i+3:]
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// sameImage reports whether two references name the same image after normalisation.
func sameImage(a, b string) bool {
	return normalizeImage(a) == normalizeImage(b)
}

// digestOf returns the sha256 digest of a kubelet imageID (REPO@sha256:HEX, with or without a
// runtime prefix), or "" when the imageID pins no repository digest (a bare image config ID,
// for example, cannot be pulled).
func digestOf(imageID string) string {
	if i := strings.Index(imageID, "://"); i >= 0 {
		imageID = imageID[i+3:]
	}
	named, err := reference.ParseNormalizedNamed(imageID)
	if err != nil {
		return ""
	}
	if d, ok := named.(reference.Digested); ok {
		return d.Digest().String()
	}
	return ""
}

// pinnedImage returns image pinned to digest: the repository of image with @digest, dropping
// its tag. Returns "" when image does not parse.
func pinnedImage(image, digest string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	// Keep the repository as the user wrote it (reg/app, not docker.io/reg/app).
	return reference.FamiliarName(named) + "@" + digest
}
