package outboxhook

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStorableJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json string
		ok   bool
	}{
		{`{"a":"b"}`, true},
		{`{"a":"\\u0000"}`, true},      // a backslash, then text
		{`{"a":"\\\\u0000"}`, true},    // two backslashes, then text
		{`{"a":"\"\u0001"}`, true},     // a quote, then a control character
		{`{"a":"\ud83d\ude00"}`, true}, // a surrogate pair
		{`{"a":"\uD83D\uDE00"}`, true},
		{`["\\", "\n", "\u00e9", "é"]`, true},
		{`{"a":"\u0000"}`, false},
		{`{"a":"\\\u0000"}`, false}, // a backslash, then NUL
		{`{"\u0000":1}`, false},
		{`{"a":"\ud800"}`, false},
		{`{"a":"\ud800x"}`, false},
		{`{"a":"\ud800\n"}`, false},
		{`{"a":"\ud800\u0041"}`, false},
		{`{"a":"\ud800\ud800"}`, false},
		{`{"a":"\udc00\ud800"}`, false},
		{`{"a":"\uDE00"}`, false},
		{"{\"a\":\"\xff\"}", false},
		{`not json`, false},
		{`{"a":"` + strings.Repeat(`\\`, 1000) + `"}`, true},
	} {
		err := storableJSON([]byte(c.json), false)
		if (err == nil) != c.ok {
			t.Errorf("storableJSON(%s) = %v, want ok %v", c.json, err, c.ok)
		}
		if json.Valid([]byte(c.json)) {
			if err2 := storableJSON([]byte(c.json), true); (err2 == nil) != (err == nil) {
				t.Errorf("storableJSON(%s) with the syntax known = %v, without %v", c.json, err2, err)
			}
		}
	}
}

// FuzzStorableJSON checks storableJSON against a decoder: what it accepts
// decodes to strings free of NUL and of U+FFFD that the input did not hold.
func FuzzStorableJSON(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u0000"`, `"\\u0000"`, `"\ud800"`, `"\ud83d\ude00"`, `["\\\u0000"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if storableJSON(data, false) != nil {
			return
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("accepted %q, which does not decode: %v", data, err)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				if strings.ContainsRune(v, 0) {
					t.Fatalf("accepted %q, which holds NUL", data)
				}
				if strings.ContainsRune(v, '\uFFFD') && !strings.Contains(string(data), "\uFFFD") && !strings.Contains(strings.ToLower(string(data)), `\ufffd`) {
					t.Fatalf("accepted %q, which decodes with a replacement character", data)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}
