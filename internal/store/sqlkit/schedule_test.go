package sqlkit

import (
	"slices"
	"testing"

	"github.com/heraldgo/herald/internal/store"
)

// Hold leaves out the rows it is told to hold back and every later row of
// their aggregates, and keeps the others in order; a row of no aggregate
// holds back only itself.
func TestHold(t *testing.T) {
	row := func(id, aggType, aggID string) store.Row {
		return store.Row{ID: id, AggregateType: aggType, AggregateID: aggID}
	}
	rows := []store.Row{
		row("1", "order", "a"), row("2", "order", "b"), row("3", "order", "a"), row("4", "", ""),
		row("5", "invoice", "a"), row("6", "order", "a"), row("7", "", ""), row("8", "order", "b"),
	}
	ids := func(rs []store.Row) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, c := range []struct {
		held []string
		want []string
	}{
		{nil, []string{"1", "2", "3", "4", "5", "6", "7", "8"}},
		{[]string{"3"}, []string{"1", "2", "4", "5", "7", "8"}},
		{[]string{"1"}, []string{"2", "4", "5", "7", "8"}},
		{[]string{"4"}, []string{"1", "2", "3", "5", "6", "7", "8"}},
		{[]string{"2", "6"}, []string{"1", "3", "4", "5", "7"}},
		{[]string{"8"}, []string{"1", "2", "3", "4", "5", "6", "7"}},
	} {
		got := Hold(rows, func(r store.Row) bool { return slices.Contains(c.held, r.ID) })
		if !slices.Equal(ids(got), c.want) {
			t.Errorf("Hold holding %v = %v, want %v", c.held, ids(got), c.want)
		}
	}
	if got := Hold(rows, func(store.Row) bool { return false }); &got[0] != &rows[0] {
		t.Error("Hold copied rows it kept whole")
	}
	if len(ids(rows)) != 8 || rows[2].ID != "3" {
		t.Error("Hold changed its input")
	}
}
