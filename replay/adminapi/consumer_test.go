package adminapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
)

// TestAdminConsumerDeadLetters: the dead letters of a broker-fed consumer
// (parked as relay.StoreSink parks them) are listed, retried and discarded
// over /v1/admin/dead-letters like a runner's, under the consumer's name,
// within the token's tenant. The retry applies them with the projection the
// consumer's row names and records their versions in relay_applied.
func TestAdminConsumerDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t, orderview.Migrations)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-c', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"c","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}'),
       ('acme', 'order-c', 2, gen_random_uuid(), 'order.line_added', 2,
        '{"order_id":"c","product_id":"p-1","quantity":3,"unit_price":{"amount":100,"currency":"EUR"},"at":"2026-01-01T00:01:00Z"}', '{}'),
       ('acme', 'order-c', 3, gen_random_uuid(), 'order.placed', 1, '{"order_id":"c","total":{"amount":300,"currency":"EUR"},"at":"2026-01-01T00:02:00Z"}', '{}'),
       ('acme', 'order-d', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"d","customer_id":"c-2","currency":"EUR","at":"2026-01-01T00:03:00Z"}', '{}'),
       ('beta', 'order-e', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"e","customer_id":"c-3","currency":"EUR","at":"2026-01-01T00:04:00Z"}', '{}')`); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(d.App, d.Projector)
	var recs []event.Record
	for deadline := time.Now().Add(20 * time.Second); len(recs) != 5; time.Sleep(20 * time.Millisecond) {
		if recs, err = store.ReadAll(ctx, event.Position{}, 100); err != nil || time.Now().After(deadline) {
			t.Fatalf("read the log: %d events, %v", len(recs), err) // all visible once no older transaction is open
		}
	}
	// The consumer billing_details applies order_details; every event
	// failed for it (after 4 attempts) or waits behind one that did.
	const consumer = "billing_details"
	if err := projections.RegisterConsumer(ctx, d.Projector, consumer, orderview.NewOrderDetails(orderview.OrderDetailsTables{})); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		err := pgx.BeginFunc(ctx, d.Projector, func(tx pgx.Tx) error {
			if err := db.SetTenant(ctx, tx, rec.Tenant); err != nil {
				return err
			}
			return relay.StoreSink{}.Park(ctx, tx, relay.DeadLetter{Consumer: consumer, Event: rec, Reason: "boom", Attempts: 4})
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Pool: d.Projector, App: d.App, Log: store, Logger: quiet, YieldTimeout: 5 * time.Second,
		ConsumerProjection: relay.ConsumerProjection})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter().UseEncodedPath() // as httpapi.NewRouter: routes match the escaped path
	api := router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	adminapi.New(svc, func(context.Context, adminapi.Audit) error { return nil }, ctx).Register(api)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	e := env{t: t, url: srv.URL, d: d}
	acme := token(t, "acme", []string{auth.ScopeAdmin}, false)
	beta := token(t, "beta", []string{auth.ScopeAdmin}, false)

	status, body := e.call(acme, http.MethodGet, "/v1/admin/dead-letters?projection="+consumer, nil)
	list, _ := body["dead_letters"].([]any)
	if status != http.StatusOK || len(list) != 4 {
		t.Fatalf("acme's letters of %s: %d %v", consumer, status, body)
	}
	ids := map[string]string{}
	for _, x := range list {
		l := x.(map[string]any)
		if l["projection"] != consumer || l["tenant"] != "acme" {
			t.Errorf("letter %v", l)
		}
		ids[l["stream"].(string)+"/"+strconv.Itoa(int(l["version"].(float64)))] = strconv.Itoa(int(l["id"].(float64)))
		if l["version"] == float64(1) && (l["head"] != true || l["attempts"] != float64(4) || l["error"] != "boom" || l["next_attempt_at"] != nil) {
			t.Errorf("head letter %v: want 4 attempts, the error, no automatic retry", l)
		}
	}
	if status, body := e.call(beta, http.MethodGet, "/v1/admin/dead-letters?projection="+consumer, nil); status != http.StatusOK || len(body["dead_letters"].([]any)) != 1 {
		t.Errorf("beta's letters: %d %v", status, body)
	}
	if status, _ := e.call(acme, http.MethodGet, "/v1/admin/dead-letters?projection=no_such_consumer", nil); status != http.StatusBadRequest {
		t.Errorf("an unknown consumer: %d, want 400", status)
	}

	// Retry order-c through its head: all three letters, in order.
	status, body = e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+ids["order-c/1"]+"/retry", nil)
	if status != http.StatusOK || body["still_parked"] != float64(0) {
		t.Fatalf("retry: %d %v", status, body)
	}
	var st string
	var version, total, applied int64
	if err := conn.QueryRow(ctx, `SELECT o.status, o.version, o.total_amount, a.version FROM strata.order_details o
JOIN strata.relay_applied a ON a.tenant_id = o.tenant_id AND a.consumer = $1 AND a.stream_id = 'order-' || o.order_id
WHERE o.tenant_id = 'acme' AND o.order_id = 'c'`, consumer).Scan(&st, &version, &total, &applied); err != nil ||
		st != "placed" || version != 3 || total != 300 || applied != 3 {
		t.Errorf("order c after the retry: %s v%d total %d, relay_applied v%d (%v); want placed v3 300, v3", st, version, total, applied, err)
	}
	if status, body := e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+ids["order-c/1"]+"/retry", nil); status != http.StatusConflict || errorCode(body) != adminapi.CodeNothingToDo {
		t.Errorf("second retry: %d %v, want 409 nothing_to_do", status, body)
	}

	// Discard order-d's letter.
	status, body = e.call(acme, http.MethodPost, "/v1/admin/dead-letters/"+ids["order-d/1"]+"/discard", map[string]any{"reason": "test order"})
	if status != http.StatusOK || body["status"] != "discarded" || body["reason"] != "test order" || body["resolved_by"] != "api:tester-acme@acme" {
		t.Errorf("discard: %d %v", status, body)
	}
	var streams, letters int64
	if err := conn.QueryRow(ctx, `SELECT parked_streams, parked_letters FROM strata.projection_checkpoints WHERE projection = $1`, consumer).Scan(&streams, &letters); err != nil ||
		streams != 1 || letters != 1 {
		t.Errorf("counters: %d streams, %d letters (%v); want beta's 1 and 1", streams, letters, err)
	}
}
