package queryapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels/queryapi"
)

func errorCodeOf(res response) string {
	var shape struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(res.body, &shape)
	return shape.Error.Code
}

// The attack: a consistency token beyond the head of the log, with
// the longest wait. No command returned it, so it is refused at once with
// 400 instead of holding the request for the whole window; a genuine token
// is still served.
func TestForgedTokenRefusedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{runners: true})
	tok := token(t, "t-forge", nil, false)
	r := b.command(tok, "/v1/orders", map[string]string{"order_id": "o-1", "customer_id": "c-1", "currency": "EUR"})
	real, err := event.ParseToken(r.Position)
	if err != nil {
		t.Fatal(err)
	}
	if res := b.do(http.MethodGet, "/v1/orders/o-1?wait=10s", tok, nil, queryapi.ConsistencyHeader, r.Position); res.status != http.StatusOK {
		t.Fatalf("genuine token: %d %s", res.status, res.body)
	}
	for _, forged := range []event.Position{
		{Major: real.Major + 1<<20, Minor: 0},      // a transaction far ahead
		{Major: real.Major, Minor: real.Minor + 1}, // past the last event of the last transaction
		{Major: 1 << 62, Minor: 1 << 62},
	} {
		for _, path := range []string{"/v1/orders/o-1?wait=10s", "/v1/orders?wait=10s", "/v1/customers/c-1/summary?wait=10s"} {
			began := time.Now()
			res := b.do(http.MethodGet, path, tok, nil, queryapi.ConsistencyHeader, forged.Token())
			took := time.Since(began)
			if res.status != http.StatusBadRequest || errorCodeOf(res) != httpapi.CodeInvalidRequest || !strings.Contains(string(res.body), "beyond the newest event") {
				t.Errorf("GET %s with forged token %s: %d %s, want 400 invalid_request", path, forged, res.status, res.body)
			}
			if took > 5*time.Second {
				t.Errorf("GET %s with forged token %s took %s: it waited", path, forged, took)
			}
		}
	}
}

// openTransaction holds a transaction with an xid open in the bundle's
// database until the returned function commits it: no log reader reads
// past it (the snapshot horizon), so commands committed meanwhile have
// genuine tokens beyond eventstore Head. The horizon is the cluster's: the
// bundle must be private.
func openTransaction(t *testing.T, b *bundle) (commit func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	done := false
	commit = func() {
		if done {
			return
		}
		done = true
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
		conn.Close(ctx)
	}
	t.Cleanup(commit)
	return commit
}

// Read-your-writes holds behind an older open transaction: the command's
// token is beyond what the log's readers may see yet (Head), but it was
// handed out, so it is waited for (503 not_yet_consistent while the
// transaction is open), never refused as forged; once the transaction
// ends the query sees the write. A check against eventstore Head instead
// of the last committed event would answer 400 here.
func TestGenuineTokenNotYetApplied(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{runners: true, private: true})
	tok := token(t, "t-horizon", nil, false)
	commit := openTransaction(t, b)
	r := b.command(tok, "/v1/orders", map[string]string{"order_id": "o-1", "customer_id": "c-1", "currency": "EUR"})
	pos, err := event.ParseToken(r.Position)
	if err != nil {
		t.Fatal(err)
	}
	if head, err := b.store.Head(context.Background()); err != nil || !head.Less(pos) {
		t.Fatalf("the log head %s (%v) is not behind the command's position %s: the transaction does not hold the horizon", head, err, pos)
	}
	res := b.do(http.MethodGet, "/v1/orders/o-1?wait=200ms", tok, nil, queryapi.ConsistencyHeader, r.Position)
	if res.status != http.StatusServiceUnavailable || errorCodeOf(res) != httpapi.CodeNotYetConsistent || res.header.Get("Retry-After") != "1" {
		t.Fatalf("genuine token behind an open transaction: %d %s (Retry-After %q), want 503 not_yet_consistent",
			res.status, res.body, res.header.Get("Retry-After"))
	}
	commit()
	res = b.do(http.MethodGet, "/v1/orders/o-1?wait=10s", tok, nil, queryapi.ConsistencyHeader, r.Position)
	var o orderView
	if res.status != http.StatusOK {
		t.Fatalf("after the transaction ended: %d %s", res.status, res.body)
	}
	res.json(t, &o)
	if o.OrderID != "o-1" || o.Version != r.Version {
		t.Fatalf("read %+v, want order o-1 at version %d", o, r.Version)
	}
}

// A tenant's waits are bounded: with one wait allowed, a second query of
// the tenant that would have to wait is refused at once with 429, while a
// query whose token is applied already needs no wait and is served, and
// another tenant's wait goes ahead. The waits are held open
// deterministically by a transaction that keeps the projections behind.
func TestConsistencyWaitsBoundedPerTenant(t *testing.T) {
	t.Parallel()
	waits, err := httpapi.NewTenantLimiter(httpapi.TenantLimitConfig{Waits: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, bundleOpts{runners: true, waits: waits, private: true})
	tokA, tokB := token(t, "t-wa", nil, false), token(t, "t-wb", nil, false)
	old := b.command(tokA, "/v1/orders", map[string]string{"order_id": "o-old", "customer_id": "c-1", "currency": "EUR"})
	if res := b.do(http.MethodGet, "/v1/orders/o-old?wait=10s", tokA, nil, queryapi.ConsistencyHeader, old.Position); res.status != http.StatusOK {
		t.Fatalf("before the transaction: %d %s", res.status, res.body)
	}
	commit := openTransaction(t, b)
	ra := b.command(tokA, "/v1/orders", map[string]string{"order_id": "o-1", "customer_id": "c-1", "currency": "EUR"})
	rb := b.command(tokB, "/v1/orders", map[string]string{"order_id": "o-1", "customer_id": "c-1", "currency": "EUR"})

	held := make(chan response, 1)
	go func() {
		held <- b.do(http.MethodGet, "/v1/orders/o-1?wait=10s", tokA, nil, queryapi.ConsistencyHeader, ra.Position)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for waits.InUse("t-wa", httpapi.SlotWaits) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first query of A never started waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}

	began := time.Now()
	res := b.do(http.MethodGet, "/v1/orders/o-1?wait=10s", tokA, nil, queryapi.ConsistencyHeader, ra.Position)
	if res.status != http.StatusTooManyRequests || errorCodeOf(res) != httpapi.CodeRateLimited || res.header.Get("Retry-After") != "1" {
		t.Errorf("second wait of A: %d %s (Retry-After %q), want 429 rate_limited", res.status, res.body, res.header.Get("Retry-After"))
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the refused wait took %s", took)
	}
	if res := b.do(http.MethodGet, "/v1/orders/o-old?wait=10s", tokA, nil, queryapi.ConsistencyHeader, old.Position); res.status != http.StatusOK {
		t.Errorf("A's applied token while its wait slot is taken: %d %s, want 200", res.status, res.body)
	}
	res = b.do(http.MethodGet, "/v1/orders/o-1?wait=200ms", tokB, nil, queryapi.ConsistencyHeader, rb.Position)
	if res.status != http.StatusServiceUnavailable || errorCodeOf(res) != httpapi.CodeNotYetConsistent {
		t.Errorf("B's wait while A's slot is taken: %d %s, want 503 not_yet_consistent (it waited)", res.status, res.body)
	}

	commit()
	if res := <-held; res.status != http.StatusOK {
		t.Errorf("A's held wait after the transaction ended: %d %s", res.status, res.body)
	}
	if n := waits.InUse("t-wa", httpapi.SlotWaits); n != 0 {
		t.Errorf("A holds %d wait slots after its query ended", n)
	}
}
