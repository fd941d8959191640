// Command archive writes the release archives of krew (tar.gz for linux and darwin, zip for
// windows) from files on disk, byte for byte the same on every machine: entries in name order,
// a fixed modification time, no owner or group names, uid and gid 0, mode 0755 for the
// executable and 0644 for the rest. It exists, rather than tar and zip on the command line,
// because their bytes depend on the host's tar or zip version and flags (GNU and BSD tar write
// different headers), and a release's sha256 must not.
//
// Usage: go run ./hack/archive -o OUT.tar.gz|OUT.zip [-exec NAME] SRC=NAME...
//
// Each SRC is stored as NAME; -exec names the entry that is executable.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// modTime is every entry's modification time: 2000-01-01, a fixed time that zip's MS-DOS
// dates (1980 on) can hold.
var modTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// entry is one file of an archive: its name inside the archive, its bytes and its mode.
type entry struct {
	name string
	data []byte
	mode int64
}

func main() {
	out := flag.String("o", "", "the archive to write: NAME.tar.gz or NAME.zip")
	executable := flag.String("exec", "", "the entry that is executable (mode 0755)")
	flag.Parse()
	if err := run(*out, *executable, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "archive:", err)
		os.Exit(1)
	}
}

func run(out, executable string, files []string) error {
	if out == "" || len(files) == 0 {
		return errors.New("usage: archive -o OUT.tar.gz|OUT.zip [-exec NAME] SRC=NAME [SRC=NAME]")
	}
	var entries []entry
	for _, f := range files {
		src, name, ok := strings.Cut(f, "=")
		if !ok || src == "" || name == "" {
			return fmt.Errorf("%q: want SRC=NAME", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if name == executable {
			mode = 0o755
		}
		entries = append(entries, entry{name: name, data: data, mode: mode})
	}
	var buf bytes.Buffer
	var err error
	switch {
	case strings.HasSuffix(out, ".tar.gz"):
		err = writeTarGz(&buf, entries)
	case strings.HasSuffix(out, ".zip"):
		err = writeZip(&buf, entries)
	default:
		err = fmt.Errorf("%s: want a name ending in .tar.gz or .zip", out)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

func sorted(entries []entry) []entry {
	s := append([]entry(nil), entries...)
	sort.Slice(s, func(i, j int) bool { return s[i].name < s[j].name })
	return s
}

// writeTarGz writes entries as a gzip-compressed tar in the PAX-free USTAR format, with a
// gzip header that carries no name and no time.
func writeTarGz(w io.Writer, entries []entry) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, e := range sorted(entries) {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     e.name,
			Size:     int64(len(e.data)),
			Mode:     e.mode,
			ModTime:  modTime,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// writeZip writes entries as a deflated zip with Unix modes; Go writes the fixed time both as an
// MS-DOS date and as an extended-timestamp field.
func writeZip(w io.Writer, entries []entry) error {
	zw := zip.NewWriter(w)
	for _, e := range sorted(entries) {
		hdr := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: modTime}
		hdr.SetMode(os.FileMode(e.mode))
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := fw.Write(e.data); err != nil {
			return err
		}
	}
	return zw.Close()
}
