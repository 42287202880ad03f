package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The example relays every tenant, the one added while it runs included, and
// each tenant's events take effect once, in its own database only.
func TestEachTenantOnceInItsOwnDatabase(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := runIn(ctx, &out, dir); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("ran in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())

	// The output: one line per event handled, and the status of each tenant.
	handled := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+) +handled invoice\.issued of (\S+)$`).FindAllStringSubmatch(out.String(), -1) {
		if !strings.HasPrefix(m[2], m[1]+"-") {
			t.Errorf("line %q: another tenant's event", m[0])
		}
		handled[m[2]]++
	}
	for _, id := range []string{"acme", "globex", "initech", "hooli"} {
		for _, inv := range []string{id + "-1", id + "-2"} {
			if handled[inv] != 1 {
				t.Errorf("%s printed handled %d times, want once", inv, handled[inv])
			}
		}
		if !regexp.MustCompile(`(?m)^` + id + ` +\w+ +0 `).MatchString(out.String()) {
			t.Errorf("no status line of %s, failing none", id)
		}
	}
	if len(handled) != 8 {
		t.Errorf("%d events handled, want 8: %v", len(handled), handled)
	}

	// Each tenant's database: a receipt per invoice of its own, once, and
	// an inbox row per event.
	for _, id := range []string{"acme", "globex", "initech", "hooli"} {
		db, err := open(filepath.Join(dir, id+".db"))
		if err != nil {
			t.Fatal(err)
		}
		var invoices, receipts []string
		if err := db.Model(&Invoice{}).Order("id").Pluck("id", &invoices).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Model(&Receipt{}).Order("invoice_id").Pluck("invoice_id", &receipts).Error; err != nil {
			t.Fatal(err)
		}
		if want := []string{id + "-1", id + "-2"}; !slices.Equal(invoices, want) || !slices.Equal(receipts, want) {
			t.Errorf("%s.db: invoices %v, receipts %v, want %v each", id, invoices, receipts, want)
		}
		var others, inbox int64
		if err := db.Model(&Receipt{}).Where("tenant <> ?", id).Count(&others).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Table("inbox_messages").Count(&inbox).Error; err != nil {
			t.Fatal(err)
		}
		if others != 0 || inbox != 2 {
			t.Errorf("%s.db: %d receipts of other tenants, %d inbox rows (want 0, 2)", id, others, inbox)
		}
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}
}
