package admin_test

import (
	"testing"

	"github.com/heraldgo/herald/admin"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order.paid":                   "order.paid",
		`naïve café – 東京 \x1b "q" 'q'`: `naïve café – 東京 \x1b "q" 'q'`, // printable: as it is
		"\x1b[2J":                      `\x1b[2J`,
		"a\rb":                         `a\rb`,
		"a\x00b":                       `a\x00b`,
		"tab\there":                    `tab\there`,
		"new\nline":                    `new\nline`,
		"\u202eevil":                   `\u202eevil`,
		"zero\u200bwidth":              `zero\u200bwidth`,
		"c1\u009b2J":                   `c1\u009b2J`,
		"del\x7f":                      `del\x7f`,
		"bad\xff\xfeutf8":              `bad\xff\xfeutf8`,
		"cut\xe6\x9d":                  `cut\xe6\x9d`,
		"\uFFFD":                       "\uFFFD", // a replacement character is printable
	} {
		if got := admin.Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
	if got := admin.PrintableLines("a\x1b\nb\rc", "  "); got != "a\\x1b\n  b\\rc" {
		t.Errorf("PrintableLines = %q", got)
	}
}
