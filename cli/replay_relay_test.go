package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/projections/relay"
)

// TestReplayDLQRelay drives the relay's own dead letters through `strata
// replay` (issue 29, finding 4): a relay publishing to watermill-sql with a
// size limit parks order a's oversized line and the event behind it under
// its checkpoint name. `dlq list --projection relay_strata_events` lists
// them; `dlq retry` with the limit still configured fails again (exit 1,
// the stream stays parked); with the limit raised it re-publishes both in
// order and unparks the stream, and a second retry has nothing to do
// (exit 3).
func TestReplayDLQRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "error",
		"STRATA_RELAY": "sql", "STRATA_RELAY_MAX_MESSAGE_BYTES": "600"}
	replayCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"replay"}, args...), testEnv(vars), &out, &errb)
		if testing.Verbose() {
			t.Logf("$ strata replay %s  => exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return code, out.String(), errb.String()
	}
	if code := run(ctx, []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-a', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"a","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}'),
       ('acme', 'order-a', 2, gen_random_uuid(), 'order.line_added', 2,
        jsonb_build_object('order_id', 'a', 'product_id', repeat('p', 800), 'quantity', 2, 'unit_price', '{"amount":100,"currency":"EUR"}'::jsonb, 'at', '2026-01-01T00:01:00Z'), '{}'),
       ('acme', 'order-b', 1, gen_random_uuid(), 'order.created', 1, '{"order_id":"b","customer_id":"c-2","currency":"EUR","at":"2026-01-01T00:03:00Z"}', '{}'),
       ('acme', 'order-a', 3, gen_random_uuid(), 'order.placed', 1, '{"order_id":"a","total":{"amount":200,"currency":"EUR"},"at":"2026-01-01T00:02:00Z"}', '{}')`); err != nil {
		t.Fatal(err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer proj.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := relay.New(postgres.New(nil, proj), proj, relay.Config{TxPublisher: relay.SQLTxPublisher(quiet), MaxMessageBytes: 600,
		PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()
	published := func() string {
		var out *string
		if err := conn.QueryRow(ctx, `SELECT string_agg((metadata->>'stream') || ' v' || (metadata->>'version'), ', ' ORDER BY transaction_id, "offset")
FROM strata.watermill_strata_events`).Scan(&out); err != nil || out == nil {
			return ""
		}
		return *out
	}

	type letter struct {
		ID         int64  `json:"id"`
		Projection string `json:"projection"`
		Stream     string `json:"stream"`
		Version    int64  `json:"version"`
		Attempts   int    `json:"attempts"`
		Error      string `json:"error"`
		Head       bool   `json:"head"`
		Status     string `json:"status"`
	}
	var list struct {
		Letters []letter `json:"dead_letters"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, stderr := replayCmd("dlq", "list", "--projection", r.Name(), "--json")
		if code != exitOK {
			t.Fatalf("dlq list --json: %d %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Letters) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay's letters never appeared: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	head, behind := list.Letters[0], list.Letters[1]
	if head.Projection != r.Name() || head.Stream != "order-a" || head.Version != 2 || !head.Head || head.Attempts != 1 || !strings.Contains(head.Error, "exceeds") ||
		behind.Version != 3 || behind.Head || behind.Status != "parked" {
		t.Fatalf("relay letters: %+v", list.Letters)
	}
	if got := published(); got != "order-a v1, order-b v1" {
		t.Errorf("published [%s], want order a's first event and order b's", got)
	}
	code, out, _ := replayCmd("status", "--json")
	var st struct {
		Others []struct {
			Name          string `json:"name"`
			State         string `json:"state"`
			ParkedStreams int64  `json:"parked_streams"`
			DeadLetters   int64  `json:"dead_letters"`
		} `json:"other_checkpoints"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || len(st.Others) != 1 || st.Others[0].Name != r.Name() ||
		st.Others[0].State != "running" || st.Others[0].ParkedStreams != 1 || st.Others[0].DeadLetters != 2 {
		t.Errorf("status --json: %d %v %s; want the relay running with 1 parked stream and 2 dead letters", code, err, out)
	}
	if code, out, _ := replayCmd("status"); code != exitOK || !strings.Contains(out, "dlq list --projection "+r.Name()) {
		t.Errorf("status: %d %s; want a pointer to the relay's dead letters", code, out)
	}

	id := strconv.FormatInt(head.ID, 10)
	if code, out, stderr := replayCmd("dlq", "retry", id); code == exitOK || !strings.Contains(out+stderr, "exceeds") {
		t.Errorf("dlq retry %s under the limit: exit %d, want a failure that names the size\n%s%s", id, code, out, stderr)
	}
	delete(vars, "STRATA_RELAY_MAX_MESSAGE_BYTES") // the operator raises the limit
	if code, out, stderr := replayCmd("dlq", "retry", id); code != exitOK || !strings.Contains(out, "unparked") {
		t.Fatalf("dlq retry %s: %d\n%s%s", id, code, out, stderr)
	}
	if got := published(); got != "order-a v1, order-b v1, order-a v2, order-a v3" {
		t.Errorf("published [%s] after the retry, want order a's parked events after the others, in order", got)
	}
	if code, _, _ := replayCmd("dlq", "retry", id); code != exitNothing {
		t.Errorf("second dlq retry: exit %d, want %d", code, exitNothing)
	}
}
