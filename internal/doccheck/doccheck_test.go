// Package doccheck holds a test: the paths the documentation names exist.
package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every repository path named in a Go comment or in a Markdown file of the
// repository (a word starting with one of its top-level folders, such as
// relay/doc.go or internal/store/postgres/migrations, or a package path
// github.com/heraldgo/herald/...) exists.
func TestNamedPathsExist(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range top {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, regexp.QuoteMeta(e.Name()))
		}
	}
	// A path: a top-level folder, then one or more /segments; or the module path.
	re := regexp.MustCompile(`(?:^|[\s(\x60"'\[])((?:github\.com/heraldgo/herald/)?(?:` + strings.Join(dirs, "|") + `)(?:/[\w.\-]+)+)`)
	check := func(where, text string) {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".,:;)")
			rel := strings.TrimPrefix(p, "github.com/heraldgo/herald/")
			if strings.ContainsAny(rel, "*<>") || strings.Contains(rel, "NNNN") || strings.Contains(rel, "...") || !pathLike(rel) && rel == p {
				continue // a pattern, or a test's name (relay/FailingPublisher), not a path
			}
			if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
				t.Errorf("%s names %s, which does not exist", where, p)
			}
		}
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case strings.HasSuffix(name, ".md") && name != "CHANGELOG.md": // the changelog names what was
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			check(rel, string(b))
		case strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go"):
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			for _, c := range f.Comments {
				check(rel, c.Text())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pathLike tells a file (relay/doc.go) or a folder of lowercase names
// (internal/store/postgres/migrations) from a test's name
// (relay/FailingPublisher) or a rate (events/s).
func pathLike(p string) bool {
	if regexp.MustCompile(`\.(go|sql|md|json|ya?ml|html|sh|mod|sum|work)$`).MatchString(p) {
		return true
	}
	return regexp.MustCompile(`^[a-z0-9_]+(/[a-z0-9_]{2,})+/?$`).MatchString(p)
}

// The README says: the library's module (outside the workspace, as a user's
// build sees it) lists no broker adapter and no watermill-sql, and no package
// of the library builds the Prometheus client.
func TestLibraryNeedsNoBrokerAdapter(t *testing.T) {
	run := func(args ...string) string { return goLibrary(t, args...) }
	adapter := regexp.MustCompile(`(?m)^(github\.com/ThreeDotsLabs/watermill-\S+|github\.com/nats-io/\S+|github\.com/rabbitmq/\S+|github\.com/twmb/franz-go\S*|github\.com/IBM/sarama)\s`)
	if m := adapter.FindAllString(run("list", "-m", "all"), -1); len(m) > 0 {
		t.Errorf("GOWORK=off go list -m all lists %v", m)
	}
	if m := regexp.MustCompile(`(?m)^github\.com/prometheus/\S+$`).FindAllString(run("list", "-deps", "./..."), -1); len(m) > 0 {
		t.Errorf("go list -deps ./... builds %v", m)
	}
}

// docs/development.md says: no test code reaches a production build, so no
// package of the library (its test-support packages included) builds
// package testing.
func TestLibraryBuildsNoTesting(t *testing.T) {
	if m := regexp.MustCompile(`(?m)^testing(/\S+)?$`).FindAllString(goLibrary(t, "list", "-deps", "./..."), -1); len(m) > 0 {
		t.Errorf("go list -deps ./... builds %v: a package that is not a test imports it", m)
	}
}

// goLibrary runs the go command in the library's module, outside the
// workspace (as a user's build sees it), and returns its output.
func goLibrary(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
