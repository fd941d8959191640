// Command image builds the inplace-rollout container image without Docker: an OCI image index
// with one image per platform, each a single layer holding the static binary, the puller binary
// that pre-pull's puller pods copy from it, CA certificates and a non-root user, written as an
// OCI image layout. Every file time and the created time are
// fixed, so the same inputs always give the same digest, which it prints on stdout.
//
//	go run ./hack/image -out dist/image -ca-certs /etc/ssl/certs/ca-certificates.crt \
//	    -binary linux/amd64=dist/inplace-rollout-linux-amd64 -binary linux/arm64=dist/inplace-rollout-linux-arm64 \
//	    -puller linux/amd64=dist/puller-linux-amd64 -puller linux/arm64=dist/puller-linux-arm64
//
// With -push REGISTRY/REPOSITORY:TAG it then pushes the index there (make image PUSH=1) and
// writes the reference by digest to stderr; stdout stays the digest alone.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/inplace-rollout/inplace-rollout/internal/ocilayer"
	"github.com/inplace-rollout/inplace-rollout/internal/ocipush"
)

// The image's fixed facts. The user is distroless' nonroot, so that a cluster's policy for
// non-root images accepts it by number.
const (
	binaryPath = "/usr/local/bin/inplace-rollout"
	pullerPath = "/usr/local/bin/puller"
	certsPath  = "/etc/ssl/certs/ca-certificates.crt"
	user       = "65532:65532"
	home       = "/home/nonroot"
)

// options are the build's inputs: the binary and the puller per platform ("linux/amd64"), and
// the CA bundle.
type options struct {
	binaries map[string][]byte
	pullers  map[string][]byte
	caCerts  []byte
}

func main() {
	out := flag.String("out", "dist/image", "directory of the OCI image layout to write; it must not exist or be empty")
	caCerts := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to put in the image at "+certsPath)
	binaries, pullers := map[string]string{}, map[string]string{}
	flag.Func("binary", "OS/ARCH=PATH of the static binary for a platform (repeatable), e.g. linux/amd64=dist/inplace-rollout-linux-amd64", platformFlag(binaries))
	flag.Func("puller", "OS/ARCH=PATH of the static puller binary for a platform (repeatable, one per -binary), e.g. linux/amd64=dist/puller-linux-amd64", platformFlag(pullers))
	push := flag.String("push", "", "after writing the layout, push the image to this REGISTRY/REPOSITORY:TAG (credentials from the Docker config)")
	flag.Parse()
	digest, err := run(*out, *caCerts, binaries, pullers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	if *push != "" {
		ref, err := ocipush.Push(context.Background(), *out, *push)
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "pushed", ref)
	}
	fmt.Println(digest)
}

// platformFlag parses OS/ARCH=PATH into m, refusing a platform given twice.
func platformFlag(m map[string]string) func(string) error {
	return func(s string) error {
		platform, path, ok := strings.Cut(s, "=")
		if !ok || platform == "" || path == "" {
			return fmt.Errorf("%q: use OS/ARCH=PATH", s)
		}
		if _, dup := m[platform]; dup {
			return fmt.Errorf("platform %s given twice", platform)
		}
		m[platform] = path
		return nil
	}
}

// run reads the inputs, builds the index and writes it to out, returning the index's digest.
func run(out, caCerts string, binaries, pullers map[string]string) (v1.Hash, error) {
	if len(binaries) == 0 {
		return v1.Hash{}, errors.New("no -binary given: name at least one, e.g. -binary linux/amd64=dist/inplace-rollout-linux-amd64")
	}
	opts := options{binaries: map[string][]byte{}, pullers: map[string][]byte{}}
	var err error
	if opts.caCerts, err = os.ReadFile(caCerts); err != nil {
		return v1.Hash{}, fmt.Errorf("reading the CA certificates: %w", err)
	}
	for platform, path := range binaries {
		if opts.binaries[platform], err = os.ReadFile(path); err != nil {
			return v1.Hash{}, fmt.Errorf("reading the binary for %s: %w", platform, err)
		}
	}
	for platform, path := range pullers {
		if opts.pullers[platform], err = os.ReadFile(path); err != nil {
			return v1.Hash{}, fmt.Errorf("reading the puller for %s: %w", platform, err)
		}
	}
	idx, err := build(opts)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := write(out, idx); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// build makes the image index: one image per platform, in platform order.
func build(opts options) (v1.ImageIndex, error) {
	if len(opts.caCerts) == 0 {
		return nil, errors.New("the CA certificate bundle is empty")
	}
	// Every platform's image holds both binaries: pre-pull runs the puller from the same image.
	for p := range opts.binaries {
		if len(opts.pullers[p]) == 0 {
			return nil, fmt.Errorf("no puller for %s: give -puller %s=PATH (make static-binaries builds it)", p, p)
		}
	}
	for p := range opts.pullers {
		if _, ok := opts.binaries[p]; !ok {
			return nil, fmt.Errorf("a puller for %s but no binary: give -binary %s=PATH", p, p)
		}
	}
	platforms := make([]string, 0, len(opts.binaries))
	for p := range opts.binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || goarch == "" {
			return nil, fmt.Errorf("platform %q: use OS/ARCH, e.g. linux/amd64", p)
		}
		img, err := image(goos, goarch, opts.binaries[p], opts.pullers[p], opts.caCerts)
		if err != nil {
			return nil, fmt.Errorf("building the %s image: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}},
		})
	}
	return idx, nil
}

// image is one platform's image: a single layer, run as the non-root user.
func image(goos, goarch string, binary, puller, caCerts []byte) (v1.Image, error) {
	tarBytes, err := layerTar(binary, puller, caCerts)
	if err != nil {
		return nil, err
	}
	layer, err := layerFrom(tarBytes)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: ocilayer.Epoch}, CreatedBy: "hack/image", Comment: "inplace-rollout and puller binaries, CA certificates, nonroot user"},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = goos, goarch
	cfg.Created = v1.Time{Time: ocilayer.Epoch}
	cfg.Author = "github.com/inplace-rollout/inplace-rollout"
	cfg.Config.User = user
	cfg.Config.Entrypoint = []string{binaryPath}
	cfg.Config.WorkingDir = home
	cfg.Config.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"SSL_CERT_FILE=" + certsPath,
	}
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.source": "https://github.com/inplace-rollout/inplace-rollout"}
	return mutate.ConfigFile(img, cfg)
}

// layerFrom gzips the layer's tar; gzip with no header time gives the same bytes every time.
func layerFrom(tarBytes []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	return l, nil
}

// layerTar writes the layer's files in a fixed order with fixed owners and times.
func layerTar(binary, puller, caCerts []byte) ([]byte, error) {
	entries := []ocilayer.File{
		{Name: "etc/", Mode: 0o755, Dir: true},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:" + home + ":/sbin/nologin\n")},
		{Name: "etc/ssl/", Mode: 0o755, Dir: true},
		{Name: "etc/ssl/certs/", Mode: 0o755, Dir: true},
		{Name: strings.TrimPrefix(certsPath, "/"), Mode: 0o644, Data: caCerts},
		{Name: "home/", Mode: 0o755, Dir: true},
		{Name: strings.TrimPrefix(home, "/") + "/", Mode: 0o700, UID: 65532, Dir: true},
		{Name: "tmp/", Mode: 0o1777, Dir: true},
		{Name: "usr/", Mode: 0o755, Dir: true},
		{Name: "usr/local/", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin/", Mode: 0o755, Dir: true},
		{Name: strings.TrimPrefix(binaryPath, "/"), Mode: 0o755, Data: binary},
		{Name: strings.TrimPrefix(pullerPath, "/"), Mode: 0o755, Data: puller},
	}
	return ocilayer.Tar(entries)
}

// write puts the index in a new OCI image layout at dir: its index.json names the one index.
func write(dir string, idx v1.ImageIndex) error {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s is not empty: remove it first", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the image layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx); err != nil {
		return fmt.Errorf("writing the image index to %s: %w", dir, err)
	}
	return nil
}
