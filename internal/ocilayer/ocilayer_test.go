package ocilayer

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

func TestTarKeepsOrderOwnersAndTime(t *testing.T) {
	files := []File{
		{Name: "etc/", Mode: 0o755, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/:/sbin/nologin\n")},
		{Name: "bin/app", Mode: 0o755, UID: 65532, Data: []byte("binary")},
	}
	first, err := Tar(files)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Tar(files)
	if err != nil || !bytes.Equal(first, second) {
		t.Fatalf("two layers of the same files differ (%v)", err)
	}
	tr := tar.NewReader(bytes.NewReader(first))
	for i, want := range files {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		data, _ := io.ReadAll(tr)
		dir := h.Typeflag == tar.TypeDir
		if h.Name != want.Name || h.Mode != want.Mode || h.Uid != want.UID || h.Gid != want.UID || !h.ModTime.Equal(Epoch) || dir != want.Dir || !bytes.Equal(data, want.Data) {
			t.Errorf("entry %d = %s mode %o uid %d gid %d time %s dir %v %q, want %+v", i, h.Name, h.Mode, h.Uid, h.Gid, h.ModTime, dir, data, want)
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("more entries than files: %v", err)
	}
}
