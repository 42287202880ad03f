package main

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// The quickstart runs, with no server.
func TestQuickstartRuns(t *testing.T) {
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Every Go block of the README is a region of main.go, which compiles and
// runs in CI, or of a test that needs a server (River's, on PostgreSQL);
// every region of main.go is in the README, in main.go's order: pasted in the
// README's order, the blocks are the program that runs.
func TestREADMESnippetsCompile(t *testing.T) {
	regions := map[string]string{}
	var inMain []string // main.go's regions, in its order
	for _, file := range []string{"main.go", "../internal/e2e/river_test.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?s)// README:(\w+)\n(.*?)\n\s*// README:end`).FindAllStringSubmatch(string(src), -1) {
			if _, dup := regions[m[1]]; dup {
				t.Fatalf("README region %q twice", m[1])
			}
			regions[m[1]] = dedent(m[2])
			if file == "main.go" {
				inMain = append(inMain, m[1])
			}
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go block in the README")
	}
	var shown []string // main.go's regions, in the README's order
	for _, b := range blocks {
		block := dedent(b[1])
		found := false
		for name, r := range regions {
			if r == block {
				found = true
				if slices.Contains(inMain, name) {
					shown = append(shown, name)
				}
			}
		}
		if !found {
			t.Errorf("README block is not a region of examples/quickstart/main.go (or of a test it names):\n%s", block)
		}
	}
	for _, name := range inMain {
		if !slices.Contains(shown, name) {
			t.Errorf("region %q of main.go is not in the README", name)
		}
	}
	if !slices.Equal(shown, inMain) {
		t.Errorf("the README shows the blocks in the order %v, main.go runs them in %v", shown, inMain)
	}
}

// The README states the Go versions the modules' go.mod files and go.work ask
// for.
func TestREADMEGoVersions(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	goLine := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("%s has no go line", path)
		}
		return m[1]
	}
	lib := goLine("../../go.mod")
	if want := "The library needs Go " + lib + " or newer"; !strings.Contains(text, want) {
		t.Errorf("the README does not say %q", want)
	}
	for _, f := range []string{"../../go.work", "../go.mod", "../../publishers/go.mod"} {
		if want := "need Go " + goLine(f) + " or newer"; !strings.Contains(text, want) {
			t.Errorf("%s asks for Go %s; the README does not say %q", f, goLine(f), want)
		}
	}
}

// The README's configuration tables list every field of every Config.
func TestREADMEConfigTables(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"outboxhook.Config": outboxhook.Config{}, "relay.Config": relay.Config{},
		"relay.NotifierConfig": relay.NotifierConfig{}, "inbox.Config": inbox.Config{},
		"walrelay.Config": walrelay.Config{},
	} {
		listed := tableFields(string(readme), name)
		if listed == nil {
			t.Errorf("no table for %s in the README", name)
			continue
		}
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() && !listed[f.Name] {
				t.Errorf("%s.%s is not in the README's table", name, f.Name)
			}
		}
	}
}

// tableFields returns the field names (backticked, comma-separated) in the
// first column of the table whose header names typ.
func tableFields(readme, typ string) map[string]bool {
	lines := strings.Split(readme, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "| `"+typ+"`") {
			continue
		}
		out := map[string]bool{}
		for _, row := range lines[i+2:] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			first := strings.Split(row, "|")[1]
			for _, m := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(first, -1) {
				out[m[1]] = true
			}
		}
		return out
	}
	return nil
}

// dedent removes the indentation common to the non-empty lines of s, and
// surrounding blank lines.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	prefix := ""
	first := true
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
