package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun runs the command lines in-process; install copies the test binary itself.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
		wantFile   string
	}{
		{"no args", nil, 0, "", ""},
		{"install", []string{"install", filepath.Join(dir, "puller")}, 0, "", filepath.Join(dir, "puller")},
		{"install over an existing file", []string{"install", filepath.Join(dir, "puller")}, 0, "", filepath.Join(dir, "puller")},
		{"install into a missing directory", []string{"install", filepath.Join(dir, "none", "puller")}, 1, "puller: creating", ""},
		{"install without DEST", []string{"install"}, 2, "usage: puller [install DEST]", ""},
		{"install with empty DEST", []string{"install", ""}, 2, "usage: puller [install DEST]", ""},
		{"unknown command", []string{"pull"}, 2, "usage: puller [install DEST]", ""},
		{"extra argument", []string{"install", filepath.Join(dir, "x"), "y"}, 2, "usage: puller [install DEST]", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tt.args, &stderr); code != tt.wantCode {
				t.Errorf("exit code %d; want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if tt.wantStderr == "" && stderr.Len() > 0 {
				t.Errorf("stderr %q; want none", stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q; want it to contain %q", stderr.String(), tt.wantStderr)
			}
			if tt.wantFile == "" {
				return
			}
			fi, err := os.Stat(tt.wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o755 {
				t.Errorf("%s mode %o; want 755", tt.wantFile, fi.Mode().Perm())
			}
			got, err := os.ReadFile(tt.wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the executable (%d bytes, want %d)", tt.wantFile, len(got), len(want))
			}
			if _, err := os.Stat(tt.wantFile + ".tmp"); !os.IsNotExist(err) {
				t.Errorf("the temporary file %s.tmp is left: %v", tt.wantFile, err)
			}
		})
	}
}

// TestInstalledBinaryRuns builds the puller, installs it with itself and runs the copy, as the
// init container and the pull containers of a puller pod do.
func TestInstalledBinaryRuns(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "puller")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dest := filepath.Join(dir, "mnt", "puller")
	if err := os.Mkdir(filepath.Dir(dest), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "install", dest).CombinedOutput(); err != nil {
		t.Fatalf("puller install: %v\n%s", err, out)
	}
	if out, err := exec.Command(dest).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("the installed puller: %v, output %q; want exit 0 and no output", err, out)
	}
	err := exec.Command(dest, "bogus").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("puller bogus: %v; want exit code 2", err)
	}
}
