package commandapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-es/strata/httpapi/decodetest"
)

// The headers every command route reads: If-Match and Idempotency-Key.
// The routes themselves are fuzzed by their module (examples/orders/ordercmd).

// ifMatchSeeds are If-Match values, valid and not.
var ifMatchSeeds = []string{
	`"3"`, `3`, ` "3" `, `"0"`, `0`, `"-1"`, `-1`, `"+3"`, `+3`, `"03"`, `W/"3"`, `*`, `"3", "4"`, `"3`, `3"`, `""`, `"`, ``,
	`"9223372036854775807"`, `"9223372036854775808"`, `"99999999999999999999"`, `"0000000000000000003"`, `"1e3"`, `"0x10"`,
	`"-0"`, `-0`, `"3\u0000"`, "\"3\x00\"", "\"\xff\"", `" 3"`, "3\r\nX-Injected: 1", `"٣"`,
}

// checkIfMatch asserts ParseIfMatch's contract: quick; a rejection is a 400
// *httpapi.Error; an accepted value is a version >= 0, written as at most 19
// decimal digits (optionally in quotes, optionally signed: strconv reads
// "+3" as 3 and "-0" as 0, which is lax but harmless), that it reads
// correctly.
func checkIfMatch(t *testing.T, v string) {
	t.Helper()
	var n int64
	var err error
	decodetest.Timed(t, func() { n, err = ParseIfMatch(v) })
	if err != nil {
		decodetest.CheckRejection(t, err, []int{http.StatusBadRequest})
		return
	}
	s := strings.TrimSpace(v)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	digits := strings.TrimLeft(s, "+-")
	if n < 0 || digits == "" || len(s)-len(digits) > 1 || len(s) > 19 || strings.Trim(digits, "0123456789") != "" {
		t.Fatalf("ParseIfMatch(%q) accepted %d", v, n)
	}
	if want, err := strconv.ParseInt(s, 10, 64); err != nil || want != n {
		t.Fatalf("ParseIfMatch(%q) = %d, want %d", v, n, want)
	}
	// What we send as ETag must come back.
	etag := strconv.Quote(strconv.FormatInt(n, 10))
	if back, err := ParseIfMatch(etag); err != nil || back != n {
		t.Fatalf("ParseIfMatch(%s) = %d, %v", etag, back, err)
	}
}

func FuzzParseIfMatch(f *testing.F) {
	for _, s := range ifMatchSeeds {
		f.Add(s)
	}
	f.Add(strconv.Quote(strconv.FormatInt(1<<62, 10)))
	f.Fuzz(checkIfMatch)
}

var idempotencyKeySeeds = []string{
	"k", "order-1:create", "550e8400-e29b-41d4-a716-446655440000", "", " ", "a b", "key\r\nX-Injected: 1", "key\x00", "key\x7f",
	"ключ", "\xff", strings.Repeat("k", 255), strings.Repeat("k", 256), "!~", "\t", "k\n",
}

// validKey is an independent statement of the Idempotency-Key rule: 1 to
// 255 bytes, each printable ASCII (0x21-0x7e).
func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func checkIdempotencyKey(t *testing.T, key string) {
	t.Helper()
	var got bool
	decodetest.Timed(t, func() { got = idempotencyKeyPattern.MatchString(key) })
	if got != validKey(key) {
		t.Fatalf("Idempotency-Key %q: pattern says %v, the rule says %v", key, got, !got)
	}
}

func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range idempotencyKeySeeds {
		f.Add(s)
	}
	f.Fuzz(checkIdempotencyKey)
}
