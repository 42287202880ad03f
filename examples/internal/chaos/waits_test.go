package main

import (
	"testing"
	"time"
)

// A slow save during which writers waited only on other writers (a row of
// accounts, the extension of its table) is the application's own: the
// samples are quiet for Herald. A wait on a relay, on nobody, or a chain
// whose writer waits on a relay in the same sample, is not.
func TestQuietSamples(t *testing.T) {
	const (
		onWriter  = `Lock:extend <- chaos_writer (active: UPDATE "accounts" SET "version"=$1); chaos_writer (active: UPDATE "accounts")`
		onRelay   = `Lock:transactionid <- chaos_relay (idle in transaction: SELECT ...)`
		onNobody  = `Lock:relation <- nobody`
		lateWoken = "the writers' process ran late (>=50ms)"
	)
	for _, tc := range []struct {
		name  string
		waits []string
		quiet bool
	}{
		{"none", nil, true},
		{"on writers", []string{onWriter}, true},
		{"on a relay", []string{onRelay}, false},
		{"a chain to a relay", []string{onWriter, onRelay}, false},
		{"on nobody", []string{onNobody}, false},
		{"late", []string{lateWoken}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var w dbWaits
			for i := range 6 {
				var waits []string
				if i == 3 {
					waits = tc.waits
				}
				w.s = append(w.s, dbWait{at: start.Add(time.Duration(i) * 100 * time.Millisecond), waits: waits})
			}
			if got := w.quiet(start, start.Add(time.Second), 5); got != tc.quiet {
				t.Fatalf("quiet = %v, want %v", got, tc.quiet)
			}
		})
	}
}
