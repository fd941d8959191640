package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/inplace-rollout/inplace-rollout/internal/ocilayer"
	"github.com/inplace-rollout/inplace-rollout/test/integration/ociregistry"
)

// programs are the compiled binaries, shared by every test of the package.
var programs *Programs

func TestMain(m *testing.M) {
	os.Exit(RunTests(m, &programs))
}

// digest builds an image and returns its manifest digest.
func digest(t *testing.T, build func() (v1.Image, error)) string {
	t.Helper()
	img, err := build()
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestDigestsAreStableAndDistinct builds every image twice, the second time from a Programs
// with the same binaries and nothing cached: each build gives the same digest, and no two
// images share one.
func TestDigestsAreStableAndDistinct(t *testing.T) {
	fresh := &Programs{app: programs.app, pause: programs.pause, puller: programs.puller}
	builds := func(p *Programs) map[string]func() (v1.Image, error) {
		b := map[string]func() (v1.Image, error){"pause": p.PauseImage, "puller": p.PullerImage}
		for _, tag := range AppTags {
			b["app:"+tag] = func() (v1.Image, error) { return p.AppImage(tag) }
		}
		return b
	}
	again := builds(fresh)
	seen := map[string]string{}
	for what, build := range builds(programs) {
		first, second := digest(t, build), digest(t, again[what])
		if first != second {
			t.Errorf("%s: two builds gave %s and %s", what, first, second)
		}
		if other, dup := seen[first]; dup {
			t.Errorf("%s and %s share the digest %s", what, other, first)
		}
		seen[first] = what
	}
}

// TestCompileIsReproducible compiles the app again elsewhere: the bytes, and so the digests,
// depend on the source and the Go version only.
func TestCompileIsReproducible(t *testing.T) {
	dir := t.TempDir()
	if err := compile(t.Context(), dir, appPackage); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(dir, "realapp"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, programs.app) {
		t.Errorf("a second compile of realapp gave other bytes (%d, first %d)", len(again), len(programs.app))
	}
}

// file is one regular file of a pulled image's layer.
type file struct {
	mode     int64
	uid, gid int
	data     []byte
}

// pull fetches ref from the registry and returns its digest, config and regular files.
func pull(t *testing.T, ref string) (string, *v1.ConfigFile, map[string]file) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("reading the config of %s: %v", ref, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s has %d layers (%v), want 1", ref, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer of %s: %v", ref, err)
		}
		if !h.ModTime.Equal(ocilayer.Epoch) {
			t.Errorf("%s: %s has the time %s, want the ocilayer.Epoch", ref, h.Name, h.ModTime)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+h.Name] = file{mode: h.Mode, uid: h.Uid, gid: h.Gid, data: data}
	}
	return desc.Digest.String(), cfg, files
}

// TestPushThenPull pushes every image to a real registry and pulls each back: digests as
// pushed, the non-root user, the entrypoint, the tag in the environment, and the binary owned
// by that user and executable.
func TestPushThenPull(t *testing.T) {
	reg, err := ociregistry.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	pushed, err := programs.Push(t.Context(), reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != len(AppTags)+1 {
		t.Errorf("Push returned %d references, want %d: %v", len(pushed), len(AppTags)+1, pushed)
	}
	type want struct {
		ref, entrypoint, env string
		binary               []byte
		port                 bool
	}
	wants := []want{{ref: PauseRef(reg.Host), entrypoint: PausePath, binary: programs.pause}}
	for _, tag := range AppTags {
		wants = append(wants, want{ref: AppRef(reg.Host, tag), entrypoint: AppPath, env: "APP_TAG=" + tag, binary: programs.app, port: true})
	}
	for _, w := range wants {
		t.Run(w.ref, func(t *testing.T) {
			d, cfg, files := pull(t, w.ref)
			if d != pushed[w.ref] {
				t.Errorf("pulled digest %s, Push said %s", d, pushed[w.ref])
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("User %q, want 65532:65532", cfg.Config.User)
			}
			if !slices.Equal(cfg.Config.Entrypoint, []string{w.entrypoint}) {
				t.Errorf("Entrypoint %q, want [%s]", cfg.Config.Entrypoint, w.entrypoint)
			}
			if w.env != "" && !slices.Contains(cfg.Config.Env, w.env) {
				t.Errorf("Env %q lacks %s", cfg.Config.Env, w.env)
			}
			if _, ok := cfg.Config.ExposedPorts["8080/tcp"]; ok != w.port {
				t.Errorf("ExposedPorts %v, want 8080/tcp: %v", cfg.Config.ExposedPorts, w.port)
			}
			if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || !cfg.Created.Equal(ocilayer.Epoch) {
				t.Errorf("config for %s/%s created %s, want linux/%s at the ocilayer.Epoch", cfg.OS, cfg.Architecture, cfg.Created, runtime.GOARCH)
			}
			f, ok := files[w.entrypoint]
			if !ok {
				t.Fatalf("no %s in the layer", w.entrypoint)
			}
			if f.mode != 0o755 || f.uid != 65532 || f.gid != 65532 || !bytes.Equal(f.data, w.binary) {
				t.Errorf("%s: mode %o, owner %d:%d, %d bytes; want 755, 65532:65532 and the compiled binary", w.entrypoint, f.mode, f.uid, f.gid, len(f.data))
			}
		})
	}
}

// TestPushPullerServesPrePull pushes the puller image, pulls it back by the reference it
// returned, and runs the binary at the path pre-pull's init container runs: "install DEST".
func TestPushPullerServesPrePull(t *testing.T) {
	reg, err := ociregistry.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ref, err := programs.PushPuller(t.Context(), reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if want := reg.Host + "/inplace-rollout-puller:dev@sha256:"; !strings.HasPrefix(ref, want) {
		t.Fatalf("PushPuller returned %q, want %s...", ref, want)
	}
	d, cfg, files := pull(t, ref)
	if !strings.HasSuffix(ref, "@"+d) {
		t.Errorf("pulled digest %s, reference %s", d, ref)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532", cfg.Config.User)
	}
	f, ok := files[PullerPath]
	if !ok || f.mode != 0o755 {
		t.Fatalf("%s in the layer: %v, mode %o; want an executable", PullerPath, ok, f.mode)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "puller-from-image")
	if err := os.WriteFile(bin, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "installed")
	if out, err := exec.Command(bin, "install", dest).CombinedOutput(); err != nil {
		t.Fatalf("%s install %s: %v\n%s", PullerPath, dest, err, out)
	}
	if out, err := exec.Command(dest).CombinedOutput(); err != nil {
		t.Fatalf("the installed puller: %v\n%s", err, out)
	}
}

// TestPushRefusesRegistriesOffLoopback checks that nothing is sent to a registry elsewhere.
func TestPushRefusesRegistriesOffLoopback(t *testing.T) {
	for _, registry := range []string{"registry.example.com", "10.233.77.1:5000", "ghcr.io"} {
		t.Run(registry, func(t *testing.T) {
			if pushed, err := programs.Push(t.Context(), registry); err == nil || !strings.Contains(err.Error(), "not on loopback") {
				t.Errorf("Push to %s: %v, %v; want refused as not on loopback", registry, pushed, err)
			}
			if ref, err := programs.PushPuller(t.Context(), registry); err == nil {
				t.Errorf("PushPuller to %s: %s, want refused", registry, ref)
			}
		})
	}
}
