package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// bin is the plugin's executable name in every archive, as kubectl finds it on PATH.
const bin = "kubectl-inplace_rollout"

// platforms are the release's: every archive of `make release`.
var platforms = []struct{ os, arch string }{
	{"darwin", "amd64"}, {"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"},
}

// paths returns the repository root and the directory of hack/tools/build.sh's binaries.
func paths(t *testing.T) (root, binDir string) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err = cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return root, binDir
}

// tool returns the path of a binary hack/tools/build.sh built.
func tool(t *testing.T, binDir, name string) string {
	t.Helper()
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing from %s: run `make tools` (hack/tools/build.sh) first: %v", name, binDir, err)
	}
	return p
}

func exe(goos string) string {
	if goos == "windows" {
		return ".exe"
	}
	return ""
}

// run runs name with args in dir and env (nil: this process's), and returns its standard output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// buildPlugin builds cmd/inplace-rollout for this machine as the release does, with version,
// into dir under the plugin's name, and returns its path.
func buildPlugin(t *testing.T, root, dir, version string) string {
	t.Helper()
	out := filepath.Join(dir, bin+exe(runtime.GOOS))
	env := append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	run(t, root, env, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/inplace-rollout")
	return out
}

// pathEnv is this process's environment with PATH set to dirs.
func pathEnv(dirs ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(env, "PATH="+strings.Join(dirs, string(os.PathListSeparator)))
}

// TestKubectlPluginVersion puts the binary on PATH under the name krew installs it as, and runs
// it through the real kubectl as `kubectl inplace-rollout version`.
func TestKubectlPluginVersion(t *testing.T) {
	root, binDir := paths(t)
	kubectl := tool(t, binDir, "kubectl")
	dir := t.TempDir()
	const version = "v0.0.0-plugin-test"
	buildPlugin(t, root, dir, version)

	out := run(t, dir, pathEnv(dir), kubectl, "inplace-rollout", "version")
	want := fmt.Sprintf("inplace-rollout %s (", version)
	if !strings.HasPrefix(out, want) || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("kubectl inplace-rollout version printed %q, want %q... naming %s/%s", out, want, runtime.GOOS, runtime.GOARCH)
	}
}

// manifest is the part of krew's Plugin this test reads.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest writes the archives of every platform with hack/archive (the real binary for
// this machine, a small file for the others) and their manifest with hack/krewmanifest, checks
// both, validates the manifest with krew's validate-krew-manifest, installs this machine's
// archive with krew itself, and runs the installed plugin through kubectl.
func TestKrewManifest(t *testing.T) {
	root, binDir := paths(t)
	kubectl := tool(t, binDir, "kubectl")
	validate := tool(t, binDir, "validate-krew-manifest")
	tool(t, binDir, "kubectl-krew")
	dir := t.TempDir()
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	archiveCmd, manifestCmd := filepath.Join(dir, "archive"), filepath.Join(dir, "krewmanifest")
	run(t, root, env, "go", "build", "-o", archiveCmd, "./hack/archive")
	run(t, root, env, "go", "build", "-o", manifestCmd, "./hack/krewmanifest")

	// A git hash as VERSION, which is no semantic version: the manifest has v0.0.0-HASH.
	const version = "2edb11d"
	hostBin := buildPlugin(t, root, t.TempDir(), "v0.0.0-"+version)
	var archives []string
	hostArchive := ""
	for _, p := range platforms {
		name := bin + exe(p.os)
		src := filepath.Join(dir, p.os+"-"+p.arch+"-"+name)
		if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
			src = hostBin
		} else if err := os.WriteFile(src, []byte("#!/bin/sh\necho "+p.os+"/"+p.arch+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		ext := ".tar.gz"
		if p.os == "windows" {
			ext = ".zip"
		}
		a := filepath.Join(dir, bin+"-"+p.os+"-"+p.arch+ext)
		run(t, dir, nil, archiveCmd, "-o", a, "-exec", name, src+"="+name)
		first, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		// Reproducible: written again, later, the archive has the same bytes.
		run(t, dir, nil, archiveCmd, "-o", a, "-exec", name, src+"="+name)
		if again, _ := os.ReadFile(a); !bytes.Equal(first, again) {
			t.Errorf("%s: written twice, the bytes differ", a)
		}
		if src == hostBin {
			hostArchive = a
		}
		archives = append(archives, a)
	}

	const url = "https://example.com/releases/download/" + version
	path := filepath.Join(dir, "inplace-rollout.yaml")
	run(t, dir, nil, manifestCmd, append([]string{"-version", version, "-url", url, "-o", path}, archives...)...)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "inplace-rollout" {
		t.Errorf("manifest is %s %s %s, want krew.googlecontainertools.github.com/v1alpha2 Plugin inplace-rollout", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "v0.0.0-"+version {
		t.Errorf("spec.version = %q, want v0.0.0-%s", m.Spec.Version, version)
	}
	if len(m.Spec.Platforms) != len(platforms) {
		t.Fatalf("%d platforms, want %d:\n%s", len(m.Spec.Platforms), len(platforms), b)
	}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		ext := ".tar.gz"
		if goos == "windows" {
			ext = ".zip"
		}
		file := bin + "-" + goos + "-" + arch + ext
		if p.URI != url+"/"+file {
			t.Errorf("%s/%s: uri %s, want %s/%s", goos, arch, p.URI, url, file)
		}
		if p.Bin != bin+exe(goos) {
			t.Errorf("%s/%s: bin %s, want %s", goos, arch, p.Bin, bin+exe(goos))
		}
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); p.Sha256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s/%s: sha256 %s, but %s has %x", goos, arch, p.Sha256, file, sum)
		}
	}

	// krew's own checks of a manifest for its index (the file name must be the plugin's).
	run(t, dir, nil, validate, "-manifest", path, "-skip-install")

	if hostArchive == "" {
		t.Skipf("no release archive for %s/%s to install", runtime.GOOS, runtime.GOARCH)
	}
	// krew installs this machine's archive as the manifest says, checking its sha256, and
	// links the plugin into KREW_ROOT/bin, where kubectl finds it.
	krewRoot := filepath.Join(dir, "krew")
	krewEnv := append(pathEnv(filepath.Join(krewRoot, "bin"), binDir), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1")
	run(t, dir, krewEnv, kubectl, "krew", "install", "--manifest="+path, "--archive="+hostArchive)
	out := run(t, dir, krewEnv, kubectl, "inplace-rollout", "version")
	if want := "inplace-rollout v0.0.0-" + version + " ("; !strings.HasPrefix(out, want) {
		t.Fatalf("kubectl inplace-rollout version, installed by krew, printed %q, want %q...", out, want)
	}
}
