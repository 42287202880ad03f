package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles returns the repository's Markdown files (outside hidden
// folders, testdata and node_modules), relative to root, and root.
func markdownFiles(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
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
		if strings.HasSuffix(name, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}

var fence = regexp.MustCompile("^\\s*(```|~~~)")

// outsideFences returns the lines of a Markdown text outside fenced code
// blocks, each with its line number.
func outsideFences(text string) (lines []string, numbers []int) {
	inFence := ""
	for i, l := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(l); m != nil {
			switch inFence {
			case "":
				inFence = m[1]
			case m[1]:
				inFence = ""
			}
			continue
		}
		if inFence == "" {
			lines = append(lines, l)
			numbers = append(numbers, i+1)
		}
	}
	return lines, numbers
}

// prose returns the lines of a Markdown text outside fenced code blocks, with
// inline code spans blanked (a link inside backticks is not a link), each with
// its line number.
func prose(text string) (lines []string, numbers []int) {
	code := regexp.MustCompile("`+[^`]*`+")
	lines, numbers = outsideFences(text)
	for i, l := range lines {
		lines[i] = code.ReplaceAllString(l, "``")
	}
	return lines, numbers
}

// anchors returns the anchors GitHub makes for a Markdown file's headings:
// the heading's text lower-cased, its links and emphasis reduced to their
// text, every character but letters, digits, '-', '_' and spaces dropped,
// spaces turned into '-'; a repeated anchor gets "-1", "-2", ... Explicit
// <a name="x"> and id="x" anchors count too.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	heading := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	link := regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	html := regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"|\sid="([^"]+)"`)
	lines, _ := outsideFences(text)
	for _, l := range lines {
		for _, m := range html.FindAllStringSubmatch(l, -1) {
			out[m[1]+m[2]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := slug(link.ReplaceAllString(m[1], "$1"))
		if n, dup := seen[a]; dup {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	}
	return out
}

// slug is GitHub's anchor for a heading's text.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"The outbox in the WAL (experimental, PostgreSQL)": "the-outbox-in-the-wal-experimental-postgresql",
		"Herald's publishers":                              "heralds-publishers",
		"`relay.Config`":                                   "relayconfig",
		"Commit → publish latency":                         "commit--publish-latency",
		"When a publish fails":                             "when-a-publish-fails",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := anchors("# A\n## B\n```\n# not a heading\n```\n## B\n## [Link](x.md) text\n")
	for _, want := range []string{"a", "b", "b-1", "link-text"} {
		if !a[want] {
			t.Errorf("anchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
}

// Every relative link of every Markdown file of the repository ([text](path),
// ![alt](path), [text](path#anchor), [text](#anchor)) names a file or folder
// that exists, and its #anchor one of the target Markdown file's headings, by
// GitHub's rules: the split of the README into docs/ cannot rot.
func TestMarkdownLinks(t *testing.T) {
	root, files := markdownFiles(t)
	link := regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	checked := 0
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		lines, numbers := prose(string(b))
		for i, l := range lines {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//") {
					continue // a URL
				}
				checked++
				where := fmt.Sprintf("%s:%d", rel, numbers[i])
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, rel)
				if path != "" {
					file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if !strings.HasPrefix(file, root) {
						t.Errorf("%s: link %s leaves the repository", where, target)
						continue
					}
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s: link %s: no such file", where, target)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				if !anchorsOf(file)[anchor] {
					t.Errorf("%s: link %s: %s has no heading with the anchor #%s", where, target, filepath.Base(file), anchor)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the check checks nothing")
	}
}

// Every Go block of every Markdown file (```go) is a region of a Go file of
// the repository, between "// README:name" and "// README:end" markers, so
// that the code the documentation shows compiles (examples/quickstart's test
// also checks that the README's blocks are its program, in order).
func TestMarkdownGoBlocksAreRegions(t *testing.T) {
	root, files := markdownFiles(t)
	regions := map[string]bool{}
	marker := regexp.MustCompile(`(?s)// README:\w+\n(.*?)\n\s*// README:end`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range marker.FindAllStringSubmatch(string(b), -1) {
			regions[dedent(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```")
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			if !regions[dedent(m[1])] {
				t.Errorf("%s: a Go block that is no README: region of a Go file:\n%s", rel, m[1])
			}
		}
	}
}

// The README's test command is the one CI runs (.ci/run), word for word.
func TestCIRunsTheREADMETestCommand(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^(go test [^#\n]*?)\s*(#.*)?$`).FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatal("the README shows no go test command")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `$`).Match(ci) {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", m[1])
	}
}

// dedent removes the indentation common to the non-empty lines of s, and
// surrounding blank lines.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	prefix, first := "", true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ws := l[:len(l)-len(strings.TrimLeft(l, "\t "))]
		if first || len(ws) < len(prefix) {
			prefix, first = ws, false
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
