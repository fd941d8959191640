package main

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/inplace-rollout/inplace-rollout/internal/ocilayer"
)

var (
	fakeBinary = []byte("\x7fELF not really a binary, fixed bytes for the test")
	fakePuller = []byte("\x7fELF not really the puller, fixed bytes for the test")
	fakeCerts  = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
)

// writeInputs writes a binary and a puller per platform and a CA bundle, and returns their paths.
func writeInputs(t *testing.T, binaries, pullers map[string][]byte) (string, map[string]string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(certs, fakeCerts, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(files map[string][]byte, suffix string) map[string]string {
		paths := map[string]string{}
		for platform, data := range files {
			p := filepath.Join(dir, filepath.Base(platform)+suffix)
			if err := os.WriteFile(p, data, 0o755); err != nil {
				t.Fatal(err)
			}
			paths[platform] = p
		}
		return paths
	}
	return certs, write(binaries, "-bin"), write(pullers, "-puller")
}

// TestRunReproducible builds the layout twice, into two directories, from the same inputs: one
// digest, printed by run and named by each layout's index.json; a changed binary or puller
// changes it.
func TestRunReproducible(t *testing.T) {
	bins := map[string][]byte{"linux/amd64": fakeBinary, "linux/arm64": append([]byte("arm64 "), fakeBinary...)}
	pullers := map[string][]byte{"linux/amd64": fakePuller, "linux/arm64": append([]byte("arm64 "), fakePuller...)}
	certs, paths, pullerPaths := writeInputs(t, bins, pullers)
	var digests []v1.Hash
	for range 2 {
		out := filepath.Join(t.TempDir(), "image")
		d, err := run(out, certs, paths, pullerPaths)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		idx, err := layout.ImageIndexFromPath(out)
		if err != nil {
			t.Fatalf("reading the layout: %v", err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Digest != d || im.Manifests[0].MediaType != types.OCIImageIndex {
			t.Fatalf("layout index.json = %+v, want one OCI index %s", im.Manifests, d)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds from the same inputs: digests %s and %s", digests[0], digests[1])
	}

	for _, changed := range []string{"binary", "puller"} {
		b, p := maps.Clone(bins), maps.Clone(pullers)
		if changed == "binary" {
			b["linux/amd64"] = append([]byte("changed "), fakeBinary...)
		} else {
			p["linux/arm64"] = append([]byte("changed "), fakePuller...)
		}
		certs, paths, pullerPaths = writeInputs(t, b, p)
		d, err := run(filepath.Join(t.TempDir(), "image"), certs, paths, pullerPaths)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if d == digests[0] {
			t.Fatalf("a changed %s kept the digest %s", changed, d)
		}
	}
}

// TestBuildConfig checks each platform's image: its platform, config and the layer's files,
// owners, modes and times.
func TestBuildConfig(t *testing.T) {
	bins := map[string][]byte{"linux/amd64": fakeBinary, "linux/arm64": append([]byte("arm64 "), fakeBinary...)}
	pullers := map[string][]byte{"linux/amd64": fakePuller, "linux/arm64": append([]byte("arm64 "), fakePuller...)}
	idx, err := build(options{binaries: bins, pullers: pullers, caCerts: fakeCerts})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(im.Manifests))
	}
	for _, desc := range im.Manifests {
		platform := desc.Platform.OS + "/" + desc.Platform.Architecture
		t.Run(platform, func(t *testing.T) {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.OS + "/" + cfg.Architecture; got != platform {
				t.Errorf("config platform %s, want %s", got, platform)
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532", cfg.Config.User)
			}
			if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/inplace-rollout"}) {
				t.Errorf("entrypoint %q, want [/usr/local/bin/inplace-rollout]", cfg.Config.Entrypoint)
			}
			if !cfg.Created.Time.Equal(ocilayer.Epoch) {
				t.Errorf("created %s, want %s", cfg.Created.Time, ocilayer.Epoch)
			}
			for _, h := range cfg.History {
				if !h.Created.Time.Equal(ocilayer.Epoch) {
					t.Errorf("history created %s, want %s", h.Created.Time, ocilayer.Epoch)
				}
			}
			if !slices.Contains(cfg.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
				t.Errorf("env %q lacks SSL_CERT_FILE", cfg.Config.Env)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 1 {
				t.Fatalf("%d layers, want 1", len(layers))
			}
			if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
				t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
			}
			files := readLayer(t, layers[0])
			want := map[string]struct {
				mode int64
				uid  int
				data []byte
			}{
				"usr/local/bin/inplace-rollout":     {0o755, 0, bins[platform]},
				"usr/local/bin/puller":              {0o755, 0, pullers[platform]},
				"etc/ssl/certs/ca-certificates.crt": {0o644, 0, fakeCerts},
				"etc/passwd":                        {0o644, 0, nil},
				"home/nonroot/":                     {0o700, 65532, nil},
				"tmp/":                              {0o1777, 0, nil},
			}
			for name, w := range want {
				f, ok := files[name]
				if !ok {
					t.Errorf("layer lacks %s", name)
					continue
				}
				if f.hdr.Mode != w.mode || f.hdr.Uid != w.uid || f.hdr.Gid != w.uid {
					t.Errorf("%s: mode %o uid %d gid %d, want mode %o uid and gid %d", name, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, w.mode, w.uid)
				}
				if w.data != nil && string(f.data) != string(w.data) {
					t.Errorf("%s: content %q, want %q", name, f.data, w.data)
				}
			}
			for name, f := range files {
				if !f.hdr.ModTime.Equal(ocilayer.Epoch) {
					t.Errorf("%s: time %s, want %s", name, f.hdr.ModTime, ocilayer.Epoch)
				}
			}
		})
	}
}

type file struct {
	hdr  *tar.Header
	data []byte
}

func readLayer(t *testing.T, l v1.Layer) map[string]file {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{hdr: h, data: data}
	}
}

func TestRunErrors(t *testing.T) {
	certs, paths, pullers := writeInputs(t, map[string][]byte{"linux/amd64": fakeBinary}, map[string][]byte{"linux/amd64": fakePuller})
	armPuller := map[string]string{"linux/amd64": pullers["linux/amd64"], "linux/arm64": pullers["linux/amd64"]}
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		out      string
		certs    string
		binaries map[string]string
		pullers  map[string]string
		wantErr  string
	}{
		{"no binary", filepath.Join(t.TempDir(), "image"), certs, nil, pullers, "no -binary given"},
		{"missing certs", filepath.Join(t.TempDir(), "image"), filepath.Join(t.TempDir(), "none"), paths, pullers, "reading the CA certificates"},
		{"bad platform", filepath.Join(t.TempDir(), "image"), certs, map[string]string{"amd64": paths["linux/amd64"]}, map[string]string{"amd64": pullers["linux/amd64"]}, "use OS/ARCH"},
		{"output not empty", nonEmpty, certs, paths, pullers, "is not empty"},
		{"no puller", filepath.Join(t.TempDir(), "image"), certs, paths, nil, "no puller for linux/amd64"},
		{"a puller without a binary", filepath.Join(t.TempDir(), "image"), certs, paths, armPuller, "a puller for linux/arm64 but no binary"},
		{"missing puller file", filepath.Join(t.TempDir(), "image"), certs, paths, map[string]string{"linux/amd64": filepath.Join(t.TempDir(), "none")}, "reading the puller for linux/amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(tt.out, tt.certs, tt.binaries, tt.pullers)
			if err == nil {
				t.Fatal("run succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q; want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
