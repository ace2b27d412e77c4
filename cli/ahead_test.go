package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestServeRefusesProjectionsAheadOfLog: a checkpoint beyond the end of
// the event log (read models restored from a later point than the events,
// as in a split deployment whose event store came back from an earlier
// backup) makes the projection refuse to run, its query routes answer 503
// and /readyz say why. The refusal outlives new appends that carry the
// log past the old checkpoint and a restart; a full rebuild ends it.
func TestServeRefusesProjectionsAheadOfLog(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "ahead-test-secret-0123456789abcdef"
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
		"STRATA_LOG_LEVEL": "error", "STRATA_PROJECTION_POLL": "50ms"}
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	create := func(base, id string) string {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, tok, http.MethodPost, "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, status, raw)
		}
		var created struct{ Position string }
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		return created.Position
	}
	base, _, stop := startServe(t, vars)
	waitReady(t, base)
	pos := create(base, "o-1")
	if status, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders/o-1?wait=10s", "", "X-Consistency-Token", pos); status != http.StatusOK {
		t.Fatalf("read o-1: %d %s", status, raw)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}

	// The read models of a later point: order_details's checkpoint moves
	// 50 transactions beyond the end of the log.
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `UPDATE strata.projection_checkpoints SET pos_major = pos_major + 50 WHERE projection = $1`, orderview.OrderDetailsName); err != nil {
		t.Fatal(err)
	}
	refused := func(base string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders/o-1", "")
			ready, rraw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/readyz", "")
			if status == http.StatusServiceUnavailable && strings.Contains(string(raw), "ahead of the event store") &&
				ready == http.StatusServiceUnavailable && strings.Contains(string(rraw), "order_details; rebuild them") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not refused within 30s: GET %d %s; /readyz %d %s", status, raw, ready, rraw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	status := func() string {
		t.Helper()
		var s string
		if err := admin.QueryRow(context.Background(), `SELECT status FROM strata.projection_checkpoints WHERE projection = $1`, orderview.OrderDetailsName).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	base, _, stop = startServe(t, vars)
	refused(base)
	// Other projections are served: the order list answers.
	if code, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders", ""); code != http.StatusOK {
		t.Errorf("the order list, whose checkpoint is fine: %d %s", code, raw)
	}
	if s := status(); s != "ahead_of_log" {
		t.Fatalf("checkpoint status %q, want ahead_of_log", s)
	}
	// New appends carry the log past the old checkpoint: still refused,
	// also after a restart (those positions are other events).
	for i := 0; i < 60; i++ {
		create(base, fmt.Sprintf("n-%d", i))
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
	base, _, stop = startServe(t, vars)
	defer stop()
	refused(base)

	// A rebuild replaces the checkpoint and the projection runs again.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"replay", "rebuild", "--projection", orderview.OrderDetailsName}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("replay rebuild exited %d: %s %s", code, out.String(), errb.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders/n-59", "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the rebuild: %d %s (status %s)", code, raw, status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := status(); s != "running" {
		t.Errorf("checkpoint status after the rebuild %q, want running", s)
	}
	waitReady(t, base)
}
