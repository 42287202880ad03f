package sqlkit

import (
	"strings"
	"testing"
)

func TestSeqsJSON(t *testing.T) {
	got, err := SeqsJSON([]Key{{ID: "a", Seq: 3}, {ID: "b", Seq: 1}, {ID: "c", Seq: 9007199254740993}})
	if err != nil || got != "[3,1,9007199254740993]" {
		t.Fatalf("SeqsJSON = %q, %v; want [3,1,9007199254740993]", got, err)
	}
	if got := JSONInts(nil); got != "[]" {
		t.Fatalf("JSONInts(nil) = %q, want []", got)
	}
	// A key without its seq would mark nothing: refused, naming the event.
	if _, err := SeqsJSON([]Key{{ID: "a", Seq: 3}, {ID: "b"}}); err == nil || !strings.Contains(err.Error(), "b claimed without its seq") {
		t.Fatalf("SeqsJSON without a seq: err = %v", err)
	}
}
