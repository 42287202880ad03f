// Package memfs is a read-only fs.FS of files held in memory, in one
// directory: the migration sets Herald assembles rather than embeds
// (PostgreSQL's partitioned set, the files goose reads). testing/fstest's
// MapFS served before, which put package testing in every production build.
package memfs

import (
	"bytes"
	"cmp"
	"io"
	"io/fs"
	"slices"
	"time"
)

// FS maps a file's name (no slash: the files lie in the root) to its
// contents, which must not change once the FS is in use.
type FS map[string][]byte

var (
	_ fs.ReadDirFS  = FS(nil)
	_ fs.ReadFileFS = FS(nil)
)

// Open opens the file name, or the root directory ".".
func (f FS) Open(name string) (fs.File, error) {
	if name == "." {
		entries, _ := f.ReadDir(".")
		return &dir{info: info{name: ".", dir: true}, entries: entries}, nil
	}
	b, ok := f[name]
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &file{Reader: bytes.NewReader(b), info: info{name: name, size: int64(len(b))}}, nil
}

// ReadFile returns a copy of the contents of the file name.
func (f FS) ReadFile(name string) ([]byte, error) {
	b, ok := f[name]
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(b), nil
}

// ReadDir lists the root directory ".", by name.
func (f FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, 0, len(f))
	for n, b := range f {
		out = append(out, fs.FileInfoToDirEntry(info{name: n, size: int64(len(b))}))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return cmp.Compare(a.Name(), b.Name()) })
	return out, nil
}

type info struct {
	name string
	size int64
	dir  bool
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }

func (i info) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

type file struct {
	*bytes.Reader
	info info
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Close() error               { return nil }

type dir struct {
	info    info
	entries []fs.DirEntry
}

func (d *dir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dir) Close() error               { return nil }

func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: fs.ErrInvalid}
}

// ReadDir returns the next n entries (all of them for n <= 0), as
// fs.ReadDirFile says.
func (d *dir) ReadDir(n int) ([]fs.DirEntry, error) {
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return out, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(d.entries))
	out := d.entries[:n]
	d.entries = d.entries[n:]
	return out, nil
}
