package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The packages of the programs the images hold, built from the module the caller runs in.
const (
	appPackage    = "github.com/inplace-rollout/inplace-rollout/test/integration/cmd/realapp"
	pausePackage  = "github.com/inplace-rollout/inplace-rollout/test/integration/cmd/pause"
	pullerPackage = "github.com/inplace-rollout/inplace-rollout/cmd/puller"
)

// Programs are the compiled binaries, in a temporary directory until Close. One value serves
// any number of image builds and pushes.
type Programs struct {
	// App, Pause and Puller are the binaries' paths: linux, this machine's architecture, so
	// that a test can also run them on the host.
	App, Pause, Puller string

	dir                string
	app, pause, puller []byte

	mu     sync.Mutex
	layers map[string]v1.Layer // by the binary's path in the image
}

// Compile builds realapp, pause and puller with CGO_ENABLED=0, -trimpath, -buildvcs=false and
// -ldflags "-s -w", which makes them static and their bytes a function of the source and the
// Go version only.
// It runs the go command in the working directory, which must be inside this module.
func Compile(ctx context.Context) (*Programs, error) {
	dir, err := os.MkdirTemp("", "realnode-images-")
	if err != nil {
		return nil, fmt.Errorf("making a directory for the image binaries: %w", err)
	}
	p := &Programs{
		dir:    dir,
		App:    filepath.Join(dir, "realapp"),
		Pause:  filepath.Join(dir, "pause"),
		Puller: filepath.Join(dir, "puller"),
	}
	if err := compile(ctx, dir, appPackage, pausePackage, pullerPackage); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for _, b := range []struct {
		path string
		dst  *[]byte
	}{{p.App, &p.app}, {p.Pause, &p.pause}, {p.Puller, &p.puller}} {
		if *b.dst, err = os.ReadFile(b.path); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("reading the compiled %s: %w", filepath.Base(b.path), err)
		}
	}
	return p, nil
}

// compile builds the main packages into dir, each under its last path element.
func compile(ctx context.Context, dir string, packages ...string) error {
	// No VCS stamp: the same source at another commit, or with unrelated local changes, must
	// give the same bytes.
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", dir + string(filepath.Separator)}, packages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("compiling %s: %w\n%s", strings.Join(packages, " "), err, out)
	}
	return nil
}

// Close removes the binaries; images already built keep their own copies.
func (p *Programs) Close() error {
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("removing the image binaries: %w", err)
	}
	return nil
}

// RunTests compiles the programs into *into, runs a test package's tests and removes the
// binaries after; a test package's TestMain calls it, as os.Exit(images.RunTests(m, &p)).
func RunTests(m *testing.M, into **Programs) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	p, err := Compile(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*into = p
	code := m.Run()
	if err := p.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}
