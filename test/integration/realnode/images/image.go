package images

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/inplace-rollout/inplace-rollout/internal/ocilayer"
)

// The images' fixed facts. The user is distroless' nonroot, as in the project's own image
// (hack/image), and owns the binaries.
const (
	// User is every image's config User.
	User = "65532:65532"
	// AppPath is the app's entrypoint; it listens on AppPort.
	AppPath = "/usr/local/bin/realapp"
	// AppPort is the port of the app's traffic, readiness (/healthz) and metrics (/metrics).
	AppPort = 8080
	// PausePath is the sandbox image's entrypoint, where the usual pause images have it.
	PausePath = "/pause"
	// PullerPath is where pre-pull's init container finds the puller binary
	// (pkg/prepull's helperBinary, hack/image's pullerPath).
	PullerPath = "/usr/local/bin/puller"

	nonRootID = 65532
	home      = "/home/nonroot"
)

// AppImage is the app image for tag: the realapp binary with APP_TAG=tag in its config.
func (p *Programs) AppImage(tag string) (v1.Image, error) {
	img, err := p.build(AppPath, p.app, config{
		entrypoint: []string{AppPath},
		env:        []string{"APP_TAG=" + tag},
		port:       AppPort,
		comment:    "realapp",
	})
	if err != nil {
		return nil, fmt.Errorf("building the app image for %s: %w", tag, err)
	}
	return img, nil
}

// PauseImage is the sandbox image: the pause binary at /pause.
func (p *Programs) PauseImage() (v1.Image, error) {
	img, err := p.build(PausePath, p.pause, config{entrypoint: []string{PausePath}, comment: "pause"})
	if err != nil {
		return nil, fmt.Errorf("building the pause image: %w", err)
	}
	return img, nil
}

// PullerImage is the image pre-pull's puller pods take their binary from (--puller-image): what
// pkg/prepull needs of the project's own image and no more, the static puller at PullerPath
// and a non-root user. Its entrypoint is the puller, so that running it does no harm.
func (p *Programs) PullerImage() (v1.Image, error) {
	img, err := p.build(PullerPath, p.puller, config{entrypoint: []string{PullerPath}, comment: "puller"})
	if err != nil {
		return nil, fmt.Errorf("building the puller image: %w", err)
	}
	return img, nil
}

// config is what differs between the images' configs.
type config struct {
	entrypoint []string
	env        []string
	port       int // 0: none exposed
	comment    string
}

// build makes a single-layer image holding binary at path, for linux and this architecture.
func (p *Programs) build(path string, binary []byte, c config) (v1.Image, error) {
	layer, err := p.layer(path, binary)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: ocilayer.Epoch}, CreatedBy: "test/integration/realnode/images", Comment: c.comment},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: ocilayer.Epoch}
	cfg.Config.User = User
	cfg.Config.Entrypoint = c.entrypoint
	cfg.Config.WorkingDir = home
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home}, c.env...)
	if c.port != 0 {
		cfg.Config.ExposedPorts = map[string]struct{}{fmt.Sprintf("%d/tcp", c.port): {}}
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	return img, nil
}

// layer is the layer holding binary at path, made once per Programs: the app images of every
// tag share it, and compressing it is most of the work of a build and a push.
func (p *Programs) layer(path string, binary []byte) (v1.Layer, error) {
	if len(binary) == 0 {
		return nil, fmt.Errorf("no binary for %s: use the Programs that Compile returned", path)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.layers[path]; ok {
		return l, nil
	}
	tarBytes, err := layerTar(path, binary)
	if err != nil {
		return nil, err
	}
	// The opener hands out the same bytes each time, and gzip with no header time compresses
	// them to the same bytes too; the compressed bytes are kept for the pushes.
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("making the layer of %s: %w", path, err)
	}
	if p.layers == nil {
		p.layers = map[string]v1.Layer{}
	}
	p.layers[path] = l
	return l, nil
}

// layerTar writes the layer's files in a fixed order with fixed owners and times: the binary
// at path, owned by the non-root user, and the passwd, group, home and /tmp a non-root
// program expects.
func layerTar(path string, binary []byte) ([]byte, error) {
	entries := []ocilayer.File{
		{Name: "etc/", Mode: 0o755, Dir: true},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:" + home + ":/sbin/nologin\n")},
		{Name: "home/", Mode: 0o755, Dir: true},
		{Name: strings.TrimPrefix(home, "/") + "/", Mode: 0o700, UID: nonRootID, Dir: true},
		{Name: "tmp/", Mode: 0o1777, Dir: true},
	}
	// The binary's parent directories, unless the entries above already have them.
	rel := strings.TrimPrefix(path, "/")
	for i := strings.Index(rel, "/"); i >= 0; i = next(rel, i) {
		entries = append(entries, ocilayer.File{Name: rel[:i+1], Mode: 0o755, Dir: true})
	}
	entries = append(entries, ocilayer.File{Name: rel, Mode: 0o755, UID: nonRootID, Data: binary})

	return ocilayer.Tar(entries)
}

// next is the index of the slash after the one at i in s, or -1.
func next(s string, i int) int {
	j := strings.Index(s[i+1:], "/")
	if j < 0 {
		return -1
	}
	return i + 1 + j
}
