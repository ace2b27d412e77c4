package commandapi

import (
	"strings"
	"testing"

	"github.com/strata-es/strata/internal/httpapi/decodetest"
)

// The fuzz seeds as plain tests, so that go test checks them, plus the
// outcomes that matter pinned down.

func TestParseIfMatch(t *testing.T) {
	t.Parallel()
	for _, s := range ifMatchSeeds {
		checkIfMatch(t, s)
	}
	for v, want := range map[string]int64{`"3"`: 3, `3`: 3, ` "3" `: 3, `"0"`: 0, `"9223372036854775807"`: 1<<63 - 1} {
		if n, err := parseIfMatch(v); err != nil || n != want {
			t.Errorf("parseIfMatch(%q) = %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{`"-1"`, `W/"3"`, `*`, `"3", "4"`, `"3`, `""`, `"9223372036854775808"`, `"1e3"`, "\"3\x00\"", "3\r\nX: 1"} {
		if n, err := parseIfMatch(v); err == nil {
			t.Errorf("parseIfMatch(%q) = %d, want an error", v, n)
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

func TestRequestBodySeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fields []string
		newDst func() any
	}{
		{"createOrderRequest", []string{"order_id", "customer_id", "currency"}, func() any { return new(createOrderRequest) }},
		{"addLineRequest", []string{"product_id", "quantity", "unit_price", "amount", "currency"}, func() any { return new(addLineRequest) }},
		{"payRequest", []string{"payment_reference"}, func() any { return new(payRequest) }},
		{"cancelRequest", []string{"reason"}, func() any { return new(cancelRequest) }},
		{"emptyRequest", []string{"order_id"}, func() any { return new(emptyRequest) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range decodetest.Seeds(tc.fields...) {
				decodetest.Check(t, s, tc.newDst)
			}
		})
	}
	// The smuggling attempts that matter, one by one.
	for _, body := range []string{
		`{"customer_id":"c-1","currency":"EUR","Customer_ID":"c-2"}`,
		`{"customer_id":"c-1","currency":"EUR","customer_id":"c-2"}`,
		`{"CUSTOMER_ID":"c-1","currency":"EUR"}`,
		`{"customer_id":"c-1","currency":"EUR","tenant_id":"other"}`,
		`{"customer_id":"c-1","currency":"EUR"}{"customer_id":"c-2"}`,
		"{\"customer_id\":\"c-\xff\",\"currency\":\"EUR\"}",
	} {
		var req createOrderRequest
		if decodetest.Check(t, []byte(body), func() any { return &req }) != nil {
			t.Errorf("createOrderRequest accepted %q", body)
		}
	}
}
