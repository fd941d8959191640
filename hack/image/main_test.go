package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	fakeBinary = []byte("\x7fELF not really a binary, fixed bytes for the test")
	fakeCerts  = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
)

// writeInputs writes a binary per platform and a CA bundle, and returns their paths.
func writeInputs(t *testing.T, binaries map[string][]byte) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(certs, fakeCerts, 0o644); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for platform, data := range binaries {
		p := filepath.Join(dir, filepath.Base(platform)+"-bin")
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		paths[platform] = p
	}
	return certs, paths
}

// TestRunReproducible builds the layout twice, into two directories, from the same inputs: one
// digest, printed by run and named by each layout's index.json; a changed binary changes it.
func TestRunReproducible(t *testing.T) {
	bins := map[string][]byte{"linux/amd64": fakeBinary, "linux/arm64": append([]byte("arm64 "), fakeBinary...)}
	certs, paths := writeInputs(t, bins)
	var digests []v1.Hash
	for range 2 {
		out := filepath.Join(t.TempDir(), "image")
		d, err := run(out, certs, paths)
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

	bins["linux/amd64"] = append([]byte("changed "), fakeBinary...)
	certs, paths = writeInputs(t, bins)
	d, err := run(filepath.Join(t.TempDir(), "image"), certs, paths)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if d == digests[0] {
		t.Fatalf("a changed binary kept the digest %s", d)
	}
}

// TestBuildConfig checks each platform's image: its platform, config and the layer's files,
// owners, modes and times.
func TestBuildConfig(t *testing.T) {
	bins := map[string][]byte{"linux/amd64": fakeBinary, "linux/arm64": append([]byte("arm64 "), fakeBinary...)}
	idx, err := build(options{binaries: bins, caCerts: fakeCerts})
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
			if !cfg.Created.Time.Equal(epoch) {
				t.Errorf("created %s, want %s", cfg.Created.Time, epoch)
			}
			for _, h := range cfg.History {
				if !h.Created.Time.Equal(epoch) {
					t.Errorf("history created %s, want %s", h.Created.Time, epoch)
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
				if !f.hdr.ModTime.Equal(epoch) {
					t.Errorf("%s: time %s, want %s", name, f.hdr.ModTime, epoch)
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
	certs, paths := writeInputs(t, map[string][]byte{"linux/amd64": fakeBinary})
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		out      string
		certs    string
		binaries map[string]string
	}{
		{"no binary", filepath.Join(t.TempDir(), "image"), certs, nil},
		{"missing certs", filepath.Join(t.TempDir(), "image"), filepath.Join(t.TempDir(), "none"), paths},
		{"bad platform", filepath.Join(t.TempDir(), "image"), certs, map[string]string{"amd64": paths["linux/amd64"]}},
		{"output not empty", nonEmpty, certs, paths},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := run(tt.out, tt.certs, tt.binaries); err == nil {
				t.Fatal("run succeeded, want an error")
			}
		})
	}
}
