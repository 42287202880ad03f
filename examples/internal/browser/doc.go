// Package browser holds the tests that drive Herald's admin page
// (github.com/heraldgo/herald/admin) in a real headless Chromium through the
// Chrome DevTools Protocol (chromedp). They skip when no Chromium is found:
// Debian's chromium package, or the binary HERALD_CHROMIUM names.
package browser
