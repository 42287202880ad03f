// Command modproxy writes Go modules from directories into a module proxy
// laid out as the go command reads one through GOPROXY=file://DIR (see "go
// help goproxy"): for each module, DIR/<escaped path>/@v/ gets VERSION.info,
// VERSION.mod (the directory's go.mod), VERSION.zip (made by
// golang.org/x/mod/zip, which leaves out what the go command leaves out:
// submodules, vendor trees, VCS directories, irregular files) and the version
// in the list file. .ci/install-check uses it to install the herald command
// from a commit the way a user installs a tagged version.
//
//	modproxy -dir DIR -version v0.0.0-20260101000000-0123456789ab -time 2026-01-01T00:00:00Z \
//		github.com/heraldgo/herald=/tmp/export ...
//
// For each module it prints the go.sum lines of the version it wrote, so the
// caller can tell the modules the go command used came from DIR.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	dir := fs.String("dir", "", "the proxy's directory (GOPROXY=file://DIR)")
	vers := fs.String("version", "", "the version to write the modules at")
	when := fs.String("time", "", "the version's time, RFC 3339 (its .info file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *vers == "" || *when == "" || fs.NArg() == 0 {
		return errors.New("usage: modproxy -dir DIR -version VERSION -time RFC3339 MODULEPATH=SRCDIR...")
	}
	t, err := time.Parse(time.RFC3339, *when)
	if err != nil {
		return fmt.Errorf("-time: %w", err)
	}
	for _, arg := range fs.Args() {
		path, src, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("%q: say MODULEPATH=SRCDIR", arg)
		}
		sums, err := write(*dir, module.Version{Path: path, Version: *vers}, t.UTC(), src)
		if err != nil {
			return fmt.Errorf("%s@%s: %w", path, *vers, err)
		}
		_, _ = fmt.Fprint(stdout, sums)
	}
	return nil
}

// write writes module m from directory src into the proxy at dir and returns
// its go.sum lines.
func write(dir string, m module.Version, t time.Time, src string) (string, error) {
	if err := module.Check(m.Path, m.Version); err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", err
	}
	if got := modfile.ModulePath(gomod); got != m.Path {
		return "", fmt.Errorf("%s/go.mod is module %q", src, got)
	}
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return "", err
	}
	escVers, err := module.EscapeVersion(m.Version)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(vdir, escVers)

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, t})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return "", err
	}
	if err := writeZip(base+".zip", m, src); err != nil {
		return "", err
	}
	if err := addToList(filepath.Join(vdir, "list"), m.Version); err != nil {
		return "", err
	}

	zipSum, err := dirhash.HashZip(base+".zip", dirhash.Hash1)
	if err != nil {
		return "", err
	}
	modSum, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", m.Path, m.Version, zipSum, m.Path, m.Version, modSum), nil
}

func writeZip(name string, m module.Version, src string) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return zip.CreateFromDir(f, m, src)
}

// addToList adds version to the list file, once.
func addToList(name, version string) error {
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if slices.Contains(versions, version) {
		return nil
	}
	versions = append(versions, version)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
