package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationUnits are the units parseDuration reads, in nanoseconds: Go's
// (time.ParseDuration) and days.
var durationUnits = map[string]float64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6,
	"s": 1e9, "m": 60e9, "h": 3600e9, "d": 24 * 3600e9,
}

// durationHint is what the errors of parseDuration suggest.
const durationHint = "90m, 36h, 7d, 1d12h"

// errNotDuration is parseDuration's error for what is not a duration.
var errNotDuration = errors.New("not a duration (" + durationHint + ")")

// maxDays is the largest whole number of days a time.Duration holds.
const maxDays = int64(math.MaxInt64 / int64(24*time.Hour))

// parseDuration reads a duration of every duration flag: a sequence of
// numbers, each with a unit, as Go writes them (90m, 1.5h, 300ms) and in days
// of 24 hours (7d, 1d12h). "0" is 0. A negative duration is refused, and one
// too large for a time.Duration (over 106751 days) is said to be too large.
func parseDuration(s string) (time.Duration, error) {
	body := s
	neg := false
	if body != "" && (body[0] == '-' || body[0] == '+') {
		neg, body = body[0] == '-', body[1:]
	}
	if body == "" {
		return 0, errNotDuration
	}
	if body == "0" {
		return 0, nil
	}
	isNum := func(r rune) bool { return r == '.' || (r >= '0' && r <= '9') }
	var (
		total  float64 // nanoseconds, to tell a sum too large
		goForm strings.Builder
		huge   bool
	)
	for rest := body; rest != ""; {
		i := strings.IndexFunc(rest, func(r rune) bool { return !isNum(r) })
		if i <= 0 { // no number, or a number without a unit
			return 0, errNotDuration
		}
		num := rest[:i]
		rest = rest[i:]
		j := strings.IndexFunc(rest, isNum)
		if j < 0 {
			j = len(rest)
		}
		unit := rest[:j]
		rest = rest[j:]
		size, ok := durationUnits[unit]
		if !ok {
			return 0, errNotDuration
		}
		v, err := strconv.ParseFloat(num, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			huge = true
		case err != nil:
			return 0, errNotDuration
		}
		total += v * size
		if unit == "d" {
			goForm.WriteString(strconv.FormatFloat(v*24, 'f', -1, 64) + "h")
		} else {
			goForm.WriteString(num + unit)
		}
	}
	if neg && total > 0 {
		return 0, errors.New("negative")
	}
	tooLarge := errors.New("too large (at most " + strconv.FormatInt(maxDays, 10) + "d)")
	if huge || total >= math.MaxInt64 {
		return 0, tooLarge
	}
	d, err := time.ParseDuration(goForm.String())
	if err != nil { // the syntax was checked: it overflowed
		return 0, tooLarge
	}
	return d, nil
}

// durationFlag is a duration flag, read by parseDuration.
type durationFlag struct {
	name string
	d    time.Duration
	raw  string // as given, or the default as written
	set  bool   // given on the command line
	// failed is why the value given was refused, naming the flag as the
	// other messages do ("--max-age: ..."; the flag package's own error says
	// "invalid value ... for flag -max-age").
	failed error
}

// durationVar defines a duration flag with a default (written as a user
// would, "5m"; "" for none) on fs, the flag set of the command being parsed.
func (c *cli) durationVar(fs *flag.FlagSet, name, def, usage string) *durationFlag {
	f := &durationFlag{name: name}
	if def != "" {
		d, err := parseDuration(def)
		if err != nil {
			panic("herald: bad default of --" + name + ": " + err.Error())
		}
		f.d, f.raw = d, def
	}
	fs.Var(f, name, usage)
	c.durations = append(c.durations, f)
	return f
}

// String is the duration as given.
func (f *durationFlag) String() string { return f.raw }

// Set reads s.
func (f *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		f.failed = fmt.Errorf("--%s: %q is %w", f.name, s, err)
		return err
	}
	f.d, f.raw, f.set, f.failed = d, s, true, nil
	return nil
}
