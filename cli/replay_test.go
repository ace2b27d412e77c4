package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// TestReplayCommand drives `strata replay` through run, as an operator
// would, and checks its output and exit codes: 0 done, 1 failed, 2 usage,
// 3 nothing to do or not found, 4 busy.
func TestReplayCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "error"}
	replayCmd := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"replay"}, args...), testEnv(vars), &out, &errb)
		if testing.Verbose() {
			t.Logf("$ strata replay %s  => exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return code, out.String(), errb.String()
	}
	// Before the schema exists the tool says what to do.
	if code, _, stderr := replayCmd("status"); code != exitFailure || !strings.Contains(stderr, "strata migrate up") {
		t.Fatalf("status on an empty database: %d %s", code, stderr)
	}
	if code := run(ctx, []string{"migrate", "up"}, testEnv(vars), &bytes.Buffer{}, &bytes.Buffer{}); code != exitOK {
		t.Fatal("migrate up failed")
	}

	// A poison event: a line added to an order that was never created.
	// order_details parks it (the only projection handling line_added).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-ghost', 1, gen_random_uuid(), 'order.line_added', 2,
        '{"order_id":"ghost","product_id":"p-1","quantity":1,"unit_price":{"amount":100,"currency":"EUR"},"at":"2026-01-01T00:00:00Z"}', '{}'),
       ('acme', 'order-ok', 1, gen_random_uuid(), 'order.created', 1,
        '{"order_id":"ok","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}', '{}')`); err != nil {
		t.Fatal(err)
	}
	proj, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector})
	if err != nil {
		t.Fatal(err)
	}
	defer proj.Close()
	store := postgres.New(nil, proj)
	r, err := projections.NewRunner(orderview.NewOrderDetails(orderview.OrderDetailsTables{}), store, proj,
		projections.RunnerConfig{Registry: order.Registry, DeadLetters: true, Failures: projections.FailurePolicy{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Up to the newest event exactly (a transaction open elsewhere in the
	// cluster must not make the catch-up stop early).
	var head event.Position
	var tx string
	var pos int64
	if err := conn.QueryRow(ctx, `SELECT tx_id::text AS tx_text, position FROM strata.events ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&tx, &pos); err != nil {
		t.Fatal(err)
	}
	head.Major, _ = strconv.ParseUint(tx, 10, 64)
	head.Minor = uint64(pos)
	if err := r.CatchUp(ctx, head); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := replayCmd("status", "--json")
	if code != exitOK {
		t.Fatalf("status --json: %d %s", code, stderr)
	}
	var st struct {
		Projections []struct {
			Name          string `json:"name"`
			DeadLetters   int64  `json:"dead_letters"`
			ParkedStreams int64  `json:"parked_streams"`
		} `json:"projections"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Projections) != len(examples.All().Projections()) || st.Projections[0].Name != "order_details" ||
		st.Projections[0].DeadLetters != 1 || st.Projections[0].ParkedStreams != 1 {
		t.Fatalf("status --json: %v %s", err, out)
	}
	if code, out, _ := replayCmd("status"); code != exitOK || !strings.Contains(out, "PARKED STREAMS") || !strings.Contains(out, "dlq list --projection order_details") {
		t.Fatalf("status table: %d\n%s", code, out)
	}

	code, out, _ = replayCmd("dlq", "list", "--json")
	var list struct {
		Letters []struct {
			ID       int64  `json:"id"`
			Stream   string `json:"stream"`
			Attempts int    `json:"attempts"`
			Error    string `json:"error"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != exitOK || err != nil || len(list.Letters) != 1 || list.Letters[0].Stream != "order-ghost" ||
		list.Letters[0].Attempts != 1 || !strings.Contains(list.Letters[0].Error, "row missing") {
		t.Fatalf("dlq list --json: %d %v %s", code, err, out)
	}
	id := strconv.FormatInt(list.Letters[0].ID, 10)
	if code, out, _ := replayCmd("dlq", "list"); code != exitOK || !strings.Contains(out, "order-ghost") {
		t.Fatalf("dlq list: %d %s", code, out)
	}
	if code, out, _ := replayCmd("dlq", "show", id); code != exitOK || !strings.Contains(out, "row missing") || !strings.Contains(out, `"product_id": "p-1"`) ||
		!strings.Contains(out, "dlq discard "+id) {
		t.Fatalf("dlq show: %d %s", code, out)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"dlq", "show", "987654"}, exitNothing},
		{[]string{"dlq", "show", "abc"}, exitUsage},
		{[]string{"dlq", "show", id, "--tenant", "beta"}, exitNothing},
		{[]string{"dlq", "show", id, "--tenant", "NOT A TENANT"}, exitUsage},
		{[]string{"dlq", "retry", id}, exitFailure}, // the order still does not exist
		{[]string{"dlq", "retry"}, exitUsage},
		{[]string{"dlq", "retry", id, "--all"}, exitUsage},
		{[]string{"dlq", "discard", id}, exitUsage}, // no reason
		{[]string{"dlq", "list", "--status", "weird"}, exitUsage},
		{[]string{"dlq", "list", "--projection", "nope"}, exitUsage},
		{[]string{"dlq", "frobnicate"}, exitUsage},
		{[]string{"rebuild"}, exitUsage},
		{[]string{"rebuild", "--projection", "nope"}, exitUsage},
		{[]string{"rebuild", "--projection", "order_list", "--all"}, exitUsage},
		{[]string{"rebuild", "--all", "--from", "garbage"}, exitUsage},
		{[]string{"rebuild", "--projection", "customer_summary", "--from", (event.Position{Major: 1, Minor: 1}).Token()}, exitUsage}, // refused: aggregates streams
		{[]string{"rebuild", "--projection", "order_list", "--abort"}, exitNothing},
		{[]string{"bogus"}, exitUsage},
	} {
		if code, _, stderr := replayCmd(c.args...); code != c.want {
			t.Errorf("replay %s: exit %d, want %d (%s)", strings.Join(c.args, " "), code, c.want, stderr)
		}
	}

	// Busy: another tool holds order_details.
	x, err := projections.AcquireExclusive(ctx, proj, "order_details", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := replayCmd("dlq", "discard", id, "--reason", "test"); code != exitBusy || !strings.Contains(stderr, "retry when it is done") {
		t.Errorf("discard while busy: %d %s", code, stderr)
	}
	x.Release()

	code, out, _ = replayCmd("dlq", "discard", id, "--reason", "ghost order, never created")
	if code != exitOK || !strings.Contains(out, "unparked") {
		t.Fatalf("discard: %d %s", code, out)
	}
	if code, _, _ := replayCmd("dlq", "discard", id, "--reason", "again"); code != exitNothing {
		t.Errorf("second discard exited %d, want %d", code, exitNothing)
	}
	if code, _, _ := replayCmd("dlq", "retry", "--all"); code != exitNothing {
		t.Errorf("retry --all with nothing parked exited %d, want %d", code, exitNothing)
	}
	code, out, _ = replayCmd("dlq", "list", "--status", "discarded", "--json")
	if code != exitOK || !strings.Contains(out, `"reason": "ghost order, never created"`) || !strings.Contains(out, `"resolved_by": "cli:`) {
		t.Fatalf("discarded letter: %d %s", code, out)
	}

	code, out, _ = replayCmd("rebuild", "--projection", "order_list", "--dry-run")
	if code != exitOK || !strings.Contains(out, "dry run") || !strings.Contains(out, "order_list into order_list__rebuild") {
		t.Fatalf("dry run: %d %s", code, out)
	}
	code, out, stderr = replayCmd("rebuild", "--all")
	if code != exitOK || !strings.Contains(out, "done: ") || !strings.Contains(out, "events/s") || !strings.Contains(stderr, "rebuild: build") {
		t.Fatalf("rebuild --all: %d\n%s\n%s", code, out, stderr)
	}

	// The rebuilds' ledgers came with their swaps: every projection is
	// complete. Then the chaos_broken defect (a checkpoint moved past an
	// event without its transaction) is reported, naming the event.
	if code, out, stderr := replayCmd("verify"); code != exitOK || !strings.Contains(out, "every ledger agrees with the store") || !strings.Contains(out, "order_details") {
		t.Fatalf("verify: %d\n%s\n%s", code, out, stderr)
	}
	if code, out, stderr := replayCmd("verify", "--deep", "--projection", "order_list,order_details"); code != exitOK || !strings.Contains(out, "order_details") ||
		strings.Contains(out, "different") || strings.Count(out, "equal") < 2 {
		t.Fatalf("verify --deep: %d\n%s\n%s", code, out, stderr)
	}
	var skipped string
	if err := conn.QueryRow(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ('acme', 'order-ok', 2, gen_random_uuid(), 'order.cancelled', 1, '{"order_id":"ok","reason":"x","at":"2026-01-02T00:00:00Z"}', '{}')
RETURNING event_id::text`).Scan(&skipped); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE strata.projection_checkpoints c SET pos_major = e.tx_id::text::numeric, pos_minor = e.position
FROM strata.events e WHERE e.event_id = $1::uuid AND c.projection = 'order_list'`, skipped); err != nil {
		t.Fatal(err)
	}
	code, out, _ = replayCmd("verify", "--projection", "order_list", "--json")
	var report struct {
		Complete bool             `json:"complete"`
		Verdicts []replay.Verdict `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(out), &report); code != exitIncomplete || err != nil || report.Complete || len(report.Verdicts) != 1 ||
		report.Verdicts[0].Problem != "missing" || report.Verdicts[0].Event == nil || report.Verdicts[0].Event.ID != skipped {
		t.Fatalf("verify after a skipped event: exit %d (want %d), %v\n%s", code, exitIncomplete, err, out)
	}
	if code, out, _ := replayCmd("verify", "--projection", "order_list"); code != exitIncomplete || !strings.Contains(out, "missing: event "+skipped) {
		t.Fatalf("verify table after a skipped event: %d\n%s", code, out)
	}
}
