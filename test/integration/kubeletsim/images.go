package kubeletsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// NotFoundHost is the registry host whose images never pull.
const NotFoundHost = "notfound.invalid"

// image is a parsed container image reference.
type image struct {
	// normalized is the reference as a container runtime reports it, e.g. docker.io/library/nginx:1.25.
	normalized string
	// repo is the normalized repository name, e.g. docker.io/library/nginx.
	repo string
	// tag is empty for a digest-only reference.
	tag string
	// digest is set when the reference pins one ("sha256:...").
	digest string
}

func parseImage(ref string) (image, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return image{}, fmt.Errorf("parsing image reference %q: %w", ref, err)
	}
	named = reference.TagNameOnly(named)
	img := image{normalized: named.String(), repo: named.Name()}
	if tagged, ok := named.(reference.Tagged); ok {
		img.tag = tagged.Tag()
	}
	if digested, ok := named.(reference.Digested); ok {
		img.digest = digested.Digest().String()
	}
	return img, nil
}

// behavior is what an image does once started.
type behavior struct {
	pullFails bool
	crashes   bool
	slow      bool
	errors    bool
	latency   bool
}

func behaviorOf(img image) behavior {
	host := reference.Domain(mustNamed(img.repo))
	return behavior{
		pullFails: host == NotFoundHost,
		crashes:   strings.HasPrefix(img.tag, "crash"),
		slow:      strings.HasPrefix(img.tag, "slow"),
		errors:    strings.HasPrefix(img.tag, "errors"),
		latency:   strings.HasPrefix(img.tag, "latency"),
	}
}

func mustNamed(repo string) reference.Named {
	n, err := reference.ParseNormalizedNamed(repo)
	if err != nil {
		// repo came out of a parsed reference, so this cannot happen.
		panic(err)
	}
	return n
}

// registry resolves tags to digests. By default a tag's digest is the SHA-256 of its normalized
// reference, so every distinct reference has a stable, distinct digest; Retag re-points a tag,
// as pushing a new image under an old tag does.
type registry struct {
	overrides map[string]string // normalized reference -> "sha256:..."
	// remote resolves the images of the real registries' hosts instead; nil when there are none.
	remote *remoteRegistries
}

func (r *registry) digestOf(img image) string {
	if img.digest != "" {
		return img.digest
	}
	if d, ok := r.overrides[img.normalized]; ok {
		return d
	}
	sum := sha256.Sum256([]byte(img.normalized))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// imageID is what the kubelet reports in containerStatuses[].imageID: REPO@sha256:DIGEST.
func (r *registry) imageID(img image) string {
	return img.repo + "@" + r.digestOf(img)
}

// retag points ref at digest ("sha256:<64 hex>" or the 64 hex digits alone).
func (r *registry) retag(ref, digest string) error {
	img, err := parseImage(ref)
	if err != nil {
		return err
	}
	if img.digest != "" {
		return fmt.Errorf("retag %q: the reference is pinned by digest; give a tag", ref)
	}
	if !strings.HasPrefix(digest, "sha256:") {
		digest = "sha256:" + digest
	}
	hexPart := strings.TrimPrefix(digest, "sha256:")
	if _, err := hex.DecodeString(hexPart); err != nil || len(hexPart) != 64 {
		return fmt.Errorf("retag %q: digest %q is not sha256 followed by 64 hex digits", ref, digest)
	}
	if r.overrides == nil {
		r.overrides = map[string]string{}
	}
	r.overrides[img.normalized] = digest
	return nil
}

// DigestFor returns a digest derived from seed, handy for Retag in tests.
func DigestFor(seed string) string {
	sum := sha256.Sum256([]byte("retag:" + seed))
	return "sha256:" + hex.EncodeToString(sum[:])
}
