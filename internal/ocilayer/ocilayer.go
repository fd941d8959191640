// Package ocilayer writes the file trees of this project's image layers (make image's, and the
// real node's test images) the same way every time: the given order, owners and modes, and one
// fixed time, so that the same files give the same layer digest.
package ocilayer

import (
	"archive/tar"
	"bytes"
	"fmt"
	"time"
)

// Epoch is every file's time, and the images' created time: a build time would change the
// digest.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer: a regular file, or a directory when Dir (Name then ends in /).
type File struct {
	Name string
	Mode int64
	// UID is the owner, user and group alike.
	UID  int
	Data []byte
	Dir  bool
}

// Tar returns the layer of files, in their order, as an uncompressed tar in PAX format.
func Tar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name: f.Name, Mode: f.Mode, Uid: f.UID, Gid: f.UID, ModTime: Epoch,
			Typeflag: tar.TypeReg, Size: int64(len(f.Data)), Format: tar.FormatPAX,
		}
		if f.Dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s to the layer: %w", f.Name, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("writing %s to the layer: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the layer: %w", err)
	}
	return buf.Bytes(), nil
}
