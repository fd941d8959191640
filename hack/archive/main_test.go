package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestArchives writes a tar.gz and a zip of two files given in reverse order, twice, and reads
// them back: the same bytes both times, entries in name order, the fixed time, no owner, the
// executable 0755 and the rest 0644.
func TestArchives(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"tool": "#!/bin/sh\n", "LICENSE": "license\n"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "tool") + "=tool", filepath.Join(dir, "LICENSE") + "=LICENSE"}
	for _, out := range []string{filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "a.zip")} {
		if err := run(out, "tool", args); err != nil {
			t.Fatal(err)
		}
		first, _ := os.ReadFile(out)
		if err := run(out, "tool", args); err != nil {
			t.Fatal(err)
		}
		if again, _ := os.ReadFile(out); !bytes.Equal(first, again) {
			t.Errorf("%s: written twice, the bytes differ", out)
		}
		var got []entry
		if filepath.Ext(out) == ".zip" {
			got = readZip(t, first)
		} else {
			got = readTarGz(t, first)
		}
		if len(got) != 2 || got[0].name != "LICENSE" || got[1].name != "tool" {
			t.Fatalf("%s: entries %v, want LICENSE, tool", out, got)
		}
		for _, e := range got {
			want := int64(0o644)
			if e.name == "tool" {
				want = 0o755
			}
			if e.mode != want || string(e.data) != files[e.name] {
				t.Errorf("%s: %s has mode %o and %q, want %o and %q", out, e.name, e.mode, e.data, want, files[e.name])
			}
		}
	}
	if err := run(filepath.Join(dir, "a.tar"), "", args); err == nil {
		t.Error("a.tar: no error for an unknown format")
	}
}

func readTarGz(t *testing.T, b []byte) []entry {
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Errorf("gzip header has time %v and name %q", gz.ModTime, gz.Name)
	}
	tr := tar.NewReader(gz)
	var entries []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(modTime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v, owner %d/%d %q/%q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		data, _ := io.ReadAll(tr)
		entries = append(entries, entry{name: h.Name, data: data, mode: h.Mode})
	}
}

func readZip(t *testing.T, b []byte) []entry {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var entries []entry
	for _, f := range zr.File {
		if !f.Modified.Equal(modTime) {
			t.Errorf("%s: time %v", f.Name, f.Modified)
		}
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(r)
		r.Close()
		entries = append(entries, entry{name: f.Name, data: data, mode: int64(f.Mode().Perm())})
	}
	return entries
}
