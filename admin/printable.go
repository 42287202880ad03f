package admin

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Printable returns s with what a terminal would act on or a page would not
// show escaped, in Go's notation: control characters (an escape sequence, a
// carriage return, a tab, a NUL: \x1b, \r, \t, \x00), the other runes that
// are not printable (C1 controls, bidi overrides and other format
// characters, spaces other than ASCII's: \u009b, \u202e) and bytes that are
// not UTF-8 (\xff). Printable text is kept as it is, backslashes included,
// so that ordinary text stays readable. The admin page and the herald
// command's human output pass every value read from the database through
// it; the JSON keeps them exact.
func Printable(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// PrintableLines is Printable for text of several lines (an error): each
// line escaped, the line breaks kept, the lines after the first indented by
// indent.
func PrintableLines(s, indent string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Printable(l)
	}
	return strings.Join(lines, "\n"+indent)
}
