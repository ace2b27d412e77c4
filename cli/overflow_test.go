package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestSumsBeyondInt64 is issue 13's item 4 as a user meets it: one
// customer pays two orders of 9223372036854775807 (the largest total an
// order may have) through the command API. The customer summary's paid
// total and the day's revenue must be exactly twice that, beyond int64,
// read through the query API from the live runners and again after
// `strata replay rebuild --all` (shadow tables, set-based batches), and no
// event may become a dead letter. Before migration 006 the second payment
// failed with "bigint out of range" and parked the customer's stream.
func TestSumsBeyondInt64(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	secret := "overflow-test-secret-0123456789abcdef0123"
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
		"STRATA_LOG_LEVEL": "error", "STRATA_PROJECTION_RETRY_ATTEMPTS": "2", "STRATA_PROJECTION_RETRY_INITIAL": "10ms"}
	base, _, stop := startServe(t, vars)
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string, header ...string) (int, []byte) {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, tok, method, path, body, header...)
		return status, raw
	}

	const maxAmount = "9223372036854775807"
	var position string
	for _, id := range []string{"o-1", "o-2"} {
		for _, c := range []struct {
			path, body string
			want       int
		}{
			{"/v1/orders", `{"order_id":"` + id + `","customer_id":"c-max","currency":"EUR"}`, http.StatusCreated},
			{"/v1/orders/" + id + "/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":` + maxAmount + `,"currency":"EUR"}}`, http.StatusOK},
			{"/v1/orders/" + id + "/place", "", http.StatusOK},
			{"/v1/orders/" + id + "/pay", `{"payment_reference":"psp-` + id + `"}`, http.StatusOK},
		} {
			status, raw := call(http.MethodPost, c.path, c.body)
			if status != c.want {
				t.Fatalf("POST %s: %d %s", c.path, status, raw)
			}
			var res struct{ Position string }
			if err := json.Unmarshal(raw, &res); err != nil {
				t.Fatal(err)
			}
			position = res.Position
		}
	}
	// One order beyond the bound is refused, naming the rule.
	status, raw := call(http.MethodPost, "/v1/orders", `{"order_id":"o-3","customer_id":"c-max","currency":"EUR"}`)
	if status != http.StatusCreated {
		t.Fatalf("create o-3: %d %s", status, raw)
	}
	// The reads below wait for o-3's creation too (the summary counts it).
	var created struct{ Position string }
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	position = created.Position
	call(http.MethodPost, "/v1/orders/o-3/lines", `{"product_id":"p-1","quantity":1,"unit_price":{"amount":`+maxAmount+`,"currency":"EUR"}}`)
	if status, raw := call(http.MethodPost, "/v1/orders/o-3/lines", `{"product_id":"p-2","quantity":1,"unit_price":{"amount":1,"currency":"EUR"}}`); status != http.StatusUnprocessableEntity ||
		!strings.Contains(string(raw), `"rule_violation"`) || !strings.Contains(string(raw), "too large") {
		t.Errorf("a line past the bound of an order total: %d %s, want 422 rule_violation", status, raw)
	}

	want := new(big.Int).Mul(big.NewInt(2), mustBig(t, maxAmount)).String() // 18446744073709551614
	// decode keeps numbers as their text: float64 would round, int64 fail.
	decode := func(raw []byte, v any) {
		t.Helper()
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(v); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
	}
	check := func(when string) {
		t.Helper()
		status, raw := call(http.MethodGet, "/v1/customers/c-max/summary?wait=10s", "", "X-Consistency-Token", position)
		var s struct {
			Orders    int64 `json:"orders"`
			PaidTotal []struct {
				Amount   json.Number `json:"amount"`
				Currency string      `json:"currency"`
			} `json:"paid_total"`
		}
		decode(raw, &s)
		if status != http.StatusOK || s.Orders != 3 || len(s.PaidTotal) != 1 || s.PaidTotal[0].Amount.String() != want || s.PaidTotal[0].Currency != "EUR" {
			t.Errorf("%s: customer summary %d %s, want paid_total %s EUR", when, status, raw, want)
		}
		// Both payments happened just now: on one UTC day, or on two
		// around midnight. The days add up to the sum either way.
		today := time.Now().UTC()
		from, to := today.AddDate(0, 0, -1).Format(time.DateOnly), today.AddDate(0, 0, 1).Format(time.DateOnly)
		status, raw = call(http.MethodGet, "/v1/revenue/daily?from="+from+"&to="+to+"&wait=10s", "", "X-Consistency-Token", position)
		var r struct {
			Days []struct {
				Amount json.Number `json:"amount"`
				Orders int64       `json:"orders"`
			} `json:"days"`
		}
		decode(raw, &r)
		sum, orders := new(big.Int), int64(0)
		for _, d := range r.Days {
			sum.Add(sum, mustBig(t, d.Amount.String()))
			orders += d.Orders
		}
		if status != http.StatusOK || sum.String() != want || orders != 2 {
			t.Errorf("%s: daily revenue %d %s, want %s over 2 orders", when, status, raw, want)
		}
		if len(r.Days) == 1 && r.Days[0].Amount.String() != want {
			t.Errorf("%s: one day's revenue is %s, want %s", when, r.Days[0].Amount, want)
		}
		status, raw = call(http.MethodGet, "/v1/orders/o-2?wait=10s", "", "X-Consistency-Token", position)
		if status != http.StatusOK || !strings.Contains(string(raw), `"total":{"amount":`+maxAmount+`,"currency":"EUR"}`) {
			t.Errorf("%s: order o-2 %d %s", when, status, raw)
		}
		status, raw = call(http.MethodGet, "/v1/admin/dead-letters", "")
		if status != http.StatusOK || !strings.Contains(string(raw), `"dead_letters":[]`) {
			t.Errorf("%s: dead letters %d %s, want none", when, status, raw)
		}
	}
	check("live")

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"replay", "rebuild", "--all"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("replay rebuild --all: exit %d\n%s%s", code, out.String(), errb.String())
	}
	check("after a rebuild")
	out.Reset()
	if code := run(ctx, []string{"replay", "status", "--json"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("replay status: exit %d %s", code, errb.String())
	}
	var st struct {
		Projections []struct {
			Name          string `json:"name"`
			DeadLetters   int64  `json:"dead_letters"`
			ParkedStreams int64  `json:"parked_streams"`
		} `json:"projections"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || len(st.Projections) == 0 {
		t.Fatalf("replay status --json: %v %s", err, out.String())
	}
	for _, p := range st.Projections {
		if p.DeadLetters != 0 || p.ParkedStreams != 0 {
			t.Errorf("%s: %d dead letters, %d parked streams; want none", p.Name, p.DeadLetters, p.ParkedStreams)
		}
	}
}

func mustBig(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("%q is not an integer", s)
	}
	return n
}
