package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// file is one entry of a layer: a regular file when body is non-nil, else
// a directory.
type file struct {
	name string // relative to the root, no leading slash: "etc/passwd"
	mode int64  // permission bits, with the sticky bit (01000) where wanted
	uid  int    // owner and group
	body []byte
}

// dir returns a directory entry owned by root.
func dir(name string, mode int64) file { return file{name: name, mode: mode} }

// layer packs files into a reproducible tar+gzip layer of media type
// application/vnd.oci.image.layer.v1.tar+gzip: entries sorted by name with
// their parent directories (0755, root) added where missing, every time
// set to mtime, numeric owners without names, USTAR headers, and gzip at
// the best compression with an empty header (no name, no time, OS
// unknown). The same files and mtime give the same bytes with the same Go
// toolchain: compress/flate is the only part that could differ between
// toolchains.
func layer(mtime time.Time, files []file) (v1.Layer, error) {
	all := map[string]file{}
	for _, f := range files {
		if _, dup := all[f.name]; dup {
			return nil, fmt.Errorf("layer: %s twice", f.name)
		}
		all[f.name] = f
		for p := path.Dir(f.name); p != "."; p = path.Dir(p) {
			if _, ok := all[p]; !ok {
				all[p] = dir(p, 0o755)
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)

	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, n := range names {
		f := all[n]
		h := &tar.Header{
			Name:    n,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: mtime.UTC(),
			Format:  tar.FormatUSTAR,
		}
		if f.body == nil {
			h.Typeflag = tar.TypeDir
			h.Name = n + "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if strings.HasPrefix(n, "/") || len(h.Name) > 100 {
			return nil, fmt.Errorf("layer: entry %q: want a relative name of at most 100 bytes", n)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", n, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, fmt.Errorf("layer: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("layer: gzip: %w", err)
	}
	gz := gzBuf.Bytes()
	// Given gzip bytes, tarball keeps them as the blob and computes the
	// diff ID from their decompression.
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
