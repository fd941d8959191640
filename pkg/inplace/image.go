package inplace

import (
	"fmt"
	"strings"
	"sync"

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
	normalized.Lock()
	n, ok := normalized.m[ref]
	normalized.Unlock()
	if ok {
		return n
	}
	n = ref
	if i := strings.Index(n, "://"); i >= 0 {
		n = n[i+3:]
	}
	if named, err := reference.ParseNormalizedNamed(n); err == nil {
		n = reference.TagNameOnly(named).String()
	}
	normalized.Lock()
	if len(normalized.m) >= maxNormalized {
		clear(normalized.m)
	}
	normalized.m[ref] = n
	normalized.Unlock()
	return n
}

// normalized remembers normalizeImage's answers: parsing a reference is a regular expression
// match, and the same few images are compared for every container of every pod on every step.
// Bounded by maxNormalized; when full it starts again.
var normalized = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

const maxNormalized = 4096

// SameImage reports whether two image references name the same image after normalisation
// (docker.io/library/, an implicit :latest, runtime prefixes such as docker-pullable://).
func SameImage(a, b string) bool {
	return a == b || normalizeImage(a) == normalizeImage(b)
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

// DigestOf returns the sha256 digest an image reference or kubelet imageID pins, or "" when it
// pins none (a tag, or a bare image config ID).
func DigestOf(imageID string) string { return digestOf(imageID) }
