package main

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// The quickstart runs, with no server.
func TestQuickstartRuns(t *testing.T) {
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Every Go block of the README is a region of main.go, which compiles and
// runs in CI, and every region is in the README.
func TestREADMESnippetsCompile(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	regions := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)// README:(\w+)\n(.*?)\n\s*// README:end`).FindAllStringSubmatch(string(src), -1) {
		regions[m[1]] = dedent(m[2])
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go block in the README")
	}
	seen := map[string]bool{}
	for _, b := range blocks {
		block := dedent(b[1])
		found := false
		for name, r := range regions {
			if r == block {
				seen[name], found = true, true
			}
		}
		if !found {
			t.Errorf("README block is not a region of examples/quickstart/main.go:\n%s", block)
		}
	}
	for name := range regions {
		if !seen[name] {
			t.Errorf("region %q of main.go is not in the README", name)
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
