package main

import "github.com/heraldgo/herald/admin"

// printable escapes what a terminal would act on or not show (admin.Printable,
// which the admin page uses too): the human output passes every value read
// from the database through it; --json prints them exact.
func printable(s string) string { return admin.Printable(s) }

// printableLines is printable for text of several lines, the lines after the
// first indented by indent (admin.PrintableLines).
func printableLines(s, indent string) string { return admin.PrintableLines(s, indent) }
