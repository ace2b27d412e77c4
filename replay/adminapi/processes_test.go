package adminapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
)

// TestProcessInstanceRoute (issue 29, finding 17): GET
// /v1/admin/processes/{process}/instances/{instance} of an instance that
// has issued no step and set no deadline (a draft order's fulfilment)
// answers empty arrays, as the OpenAPI document requires, and renders the
// last event with the field names every other route gives an event
// (event_id, schema_version, recorded_at...), never Go's (ID, Data). The
// answer is validated against the document.
func TestProcessInstanceRoute(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testdb.New(t, orderview.Migrations)
	conn, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-o-1', 1, '7d1c2b7e-0f7a-4a55-9d39-5b3a2c1e0001', 'order.created', 1,
        '{"order_id":"o-1","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{"actor":"alice"}')`); err != nil {
		t.Fatal(err)
	}
	m, err := process.New(fulfilcmd.Definition(fulfilcmd.Config{PaymentTimeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	store := postgres.New(d.App, d.Projector)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := process.NewRunner(process.Spec{Manager: m}, store, d.Projector, process.RunnerConfig{Registry: order.Registry, Logger: quiet,
		Poll: 20 * time.Millisecond, LeaseRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	for {
		in, err := process.ReadInstance(ctx, d.Projector, "acme", fulfilcmd.Name, "o-1")
		if err == nil && in.Status == "draft" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the instance was never decided: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	<-done

	svc, err := replay.New(replay.Config{Registry: order.Registry, Projections: orderview.All(), Processes: []process.Manager{m}, Pool: d.Projector, App: d.App, Log: store,
		Logger: quiet, YieldTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter().UseEncodedPath()
	api := router.NewRoute().Subrouter()
	api.Use(httpapi.Authenticate(verifier))
	adminapi.New(svc, func(context.Context, adminapi.Audit) error { return nil }, ctx).Register(api)
	srv := httptest.NewServer(httpapi.WithRequestID(httpapi.Recover(router)))
	defer srv.Close()
	e := env{t: t, url: srv.URL, d: d}

	status, body := e.call(token(t, "acme", []string{auth.ScopeAdmin}, false), "GET", "/v1/admin/processes/fulfilment/instances/o-1", nil)
	if status != 200 {
		t.Fatalf("status %d: %v", status, body)
	}
	for _, f := range []string{"steps", "deadlines", "history"} {
		if _, ok := body[f].([]any); !ok {
			t.Errorf("%s = %#v, want an array", f, body[f])
		}
	}
	ev, ok := body["last_event"].(map[string]any)
	if !ok {
		t.Fatalf("last_event = %#v, want an object", body["last_event"])
	}
	want := map[string]any{"event_id": "7d1c2b7e-0f7a-4a55-9d39-5b3a2c1e0001", "tenant": "acme", "stream": "order-o-1", "version": float64(1),
		"type": "order.created", "schema_version": float64(1)}
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("last_event.%s = %#v, want %#v (last_event %v)", k, ev[k], v, ev)
		}
	}
	if data, _ := ev["data"].(map[string]any); data["order_id"] != "o-1" {
		t.Errorf("last_event.data = %#v, want the payload as JSON", ev["data"])
	}
	if md, _ := ev["metadata"].(map[string]any); md["actor"] != "alice" {
		t.Errorf("last_event.metadata = %#v", ev["metadata"])
	}
	if p, _ := ev["position"].(string); p == "" {
		t.Errorf("last_event.position = %#v, want a consistency token", ev["position"])
	}
	if _, ok := ev["recorded_at"].(string); !ok {
		t.Errorf("last_event.recorded_at = %#v", ev["recorded_at"])
	}
	for _, goName := range []string{"ID", "Data", "Tenant", "RecordedAt"} {
		if _, ok := ev[goName]; ok {
			t.Errorf("last_event has Go's field name %s: %v", goName, ev)
		}
	}
}
