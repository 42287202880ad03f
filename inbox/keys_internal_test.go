package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// A key is stored as given only when no database's collation equates it with
// another and it cannot be a hashed key; every other is hashed under
// hashPrefix, so that two ids share a key only if they are equal.
func TestStoredKey(t *testing.T) {
	long := strings.Repeat("x", MaxKeyBytes+1)
	for _, c := range []struct {
		in      string
		asGiven bool
	}{
		{"", true},
		{"0f0e2d8c-3a57-4b7e-9d1c-1b2a3c4d5e6f", true},
		{strings.Repeat("j", MaxKeyBytes), true},
		{"a b", true},
		{" a", true},
		{"a\t", true},
		{"SHA256:abc", true},
		{long, false},
		{"a\x00b", false},
		{"a\xffb", false},
		{"a ", false},
		{" ", false},
		{"sha256:" + hexSum(long), false},
		{"sha256:", false},
		{"#sha256:" + hexSum(long), false},
		{"#sha256:x", false},
	} {
		got := storedKey(c.in)
		if c.asGiven {
			if got != c.in {
				t.Errorf("storedKey(%q) = %q, want it as given", c.in, got)
			}
			continue
		}
		if want := "#sha256:" + hexSum(c.in); got != want {
			t.Errorf("storedKey(%.20q) = %q, want %q", c.in, got, want)
		}
		if len(got) > MaxKeyBytes || strings.HasSuffix(got, " ") || !isHashed(got) {
			t.Errorf("storedKey(%.20q) = %q: not a hashed key", c.in, got)
		}
	}
	if isHashed("#sha256:" + strings.ToUpper(hexSum("a"))[:63]) {
		t.Error("isHashed accepts 63 hex digits")
	}
}

// The keys earlier versions stored an id under are looked up only where
// today's differs, never in today's hashed form.
func TestLegacyKeys(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		consumer, id string
		want         [][2]string
	}{
		{"c", "0f0e2d8c-3a57-4b7e-9d1c-1b2a3c4d5e6f", nil},
		{"c", "a ", [][2]string{{"c", "a "}}},
		{"c", "sha256:abc", [][2]string{{"c", "sha256:abc"}}},
		{"c", long, [][2]string{{"c", long}, {"c", "sha256:" + hexSum(long)}}},
		{"c ", long, [][2]string{{"c ", long}, {"c ", "sha256:" + hexSum(long)}}},
		{long, "m", [][2]string{{long, "m"}, {"sha256:" + hexSum(long), "m"}}},
		{"c", "a\x00b", [][2]string{{"c", "a\x00b"}, {"c", "sha256:" + hexSum("a\x00b")}}},
		// A literal of today's hashed form is not looked up as given: that
		// row is today's hashed key of another id.
		{"c", "#sha256:" + hexSum(long), nil},
		{"c", "#sha256:x", [][2]string{{"c", "#sha256:x"}}},
	} {
		if got := legacyKeys(c.consumer, c.id); !slices.Equal(got, c.want) {
			t.Errorf("legacyKeys(%.20q, %.20q) = %.30q, want %.30q", c.consumer, c.id, got, c.want)
		}
	}
}

// A deduplication key is stored hashed under intentPrefix, a form storedKey
// gives no message id, and the legacy lookups of an id never read it.
func TestIntentKeyNamespace(t *testing.T) {
	for _, k := range []string{"", "order-42", strings.Repeat("k", 1000) + "\x00 ", "#sha256:" + hexSum("x")} {
		got := intentKey(k)
		if got != intentPrefix+hexSum(k) || len(got) > MaxKeyBytes || isHashed(got) {
			t.Errorf("intentKey(%.20q) = %q", k, got)
		}
		// The id that is literally the stored form is stored otherwise.
		if storedKey(got) == got {
			t.Errorf("the id %q is stored as the key %.20q", got, k)
		}
		if l := legacyKeys("c", got); len(l) != 0 {
			t.Errorf("legacyKeys of the id %q = %q, want none", got, l)
		}
	}
}

// A message is looked up elsewhere only for former names, or for earlier
// versions' keys: a UUID without a deduplication key or former names costs
// no read.
func TestLookups(t *testing.T) {
	const id = "0f0e2d8c-3a57-4b7e-9d1c-1b2a3c4d5e6f"
	in := &Inbox{cfg: Config{FormerConsumers: map[string][]string{"new": {"old", "older "}}}}
	for _, c := range []struct {
		consumer, id, key string
		disableLegacy     bool
		want              [][2]string
	}{
		{"c", id, "", false, nil},
		{"c", id, "k", true, nil},
		{"c", id, "k", false, [][2]string{{"c", id}}},
		{"new", id, "", true, [][2]string{{"old", id}, {storedKey("older "), id}}},
		{"new", id, "k", true, [][2]string{{"old", intentKey("k")}, {storedKey("older "), intentKey("k")}}},
		{"new", id, "", false, [][2]string{{"old", id}, {storedKey("older "), id}, {"older ", id}}},
	} {
		in.cfg.DisableLegacyKeys = c.disableLegacy
		if got := in.lookups(c.consumer, c.id, c.key); !slices.Equal(got, c.want) {
			t.Errorf("lookups(%q, %q, %q, legacy off %v) = %q, want %q", c.consumer, c.id, c.key, c.disableLegacy, got, c.want)
		}
	}
}

// FormerConsumers names non-empty names, other than the current one, and
// only Consumer when it is set.
func TestFormerConsumersValidate(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{FormerConsumers: map[string][]string{"new": {"old"}}}, true},
		{Config{Consumer: "new", FormerConsumers: map[string][]string{"new": {"old"}}}, true},
		{Config{Consumer: "new", FormerConsumers: map[string][]string{"other": {"old"}}}, false},
		{Config{FormerConsumers: map[string][]string{"": {"old"}}}, false},
		{Config{FormerConsumers: map[string][]string{"new": {""}}}, false},
		{Config{FormerConsumers: map[string][]string{"new": {"new"}}}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%v) = %v, want ok %v", c.cfg.FormerConsumers, err, c.ok)
		}
	}
}
