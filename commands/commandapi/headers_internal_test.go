package commandapi

import (
	"strings"
	"testing"
)

// The fuzz seeds as plain tests, so that go test checks them, plus the
// outcomes that matter pinned down.

func TestParseIfMatch(t *testing.T) {
	t.Parallel()
	for _, s := range ifMatchSeeds {
		checkIfMatch(t, s)
	}
	for v, want := range map[string]int64{`"3"`: 3, `3`: 3, ` "3" `: 3, `"0"`: 0, `"9223372036854775807"`: 1<<63 - 1} {
		if n, err := ParseIfMatch(v); err != nil || n != want {
			t.Errorf("ParseIfMatch(%q) = %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{`"-1"`, `W/"3"`, `*`, `"3", "4"`, `"3`, `""`, `"9223372036854775808"`, `"1e3"`, "\"3\x00\"", "3\r\nX: 1"} {
		if n, err := ParseIfMatch(v); err == nil {
			t.Errorf("ParseIfMatch(%q) = %d, want an error", v, n)
		}
	}
}

func TestIdempotencyKeyPattern(t *testing.T) {
	t.Parallel()
	for _, k := range idempotencyKeySeeds {
		checkIdempotencyKey(t, k)
	}
	for k, want := range map[string]bool{"k": true, strings.Repeat("k", 255): true, "!~": true,
		"": false, strings.Repeat("k", 256): false, "a b": false, "k\r\nX: 1": false, "ключ": false, "\xff": false} {
		if got := idempotencyKeyPattern.MatchString(k); got != want {
			t.Errorf("Idempotency-Key %.20q valid = %v, want %v", k, got, want)
		}
	}
}
