package relay

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/pgtest"
)

func TestMain(m *testing.M) {
	sweepNATSDirs()
	pgtest.Main(m)
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger logs at level and above into the test's log.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The NATS server of the tests: the machine's (127.0.0.1:4222) when it
// answers with JetStream enabled, otherwise an embedded nats-server with
// JetStream, started once per test binary. Never a skip.
// STRATA_TEST_NATS_EMBEDDED=1 uses the embedded one regardless.
var natsServer struct {
	once sync.Once
	url  string
	err  error
}

const machineNATS = "nats://127.0.0.1:4222"

// natsDirPrefix names the store directories of embedded servers; the
// owner's pid is in the name, so that the next run removes the directories
// of runs that died.
const natsDirPrefix = "strata-relaytest-nats-"

func natsURL(t testing.TB) string {
	t.Helper()
	natsServer.once.Do(func() {
		if os.Getenv("STRATA_TEST_NATS_EMBEDDED") != "" {
			// fall through to the embedded server
		} else if nc, err := nats.Connect(machineNATS, nats.Timeout(time.Second)); err == nil {
			js, jerr := nc.JetStream()
			if jerr == nil {
				_, jerr = js.AccountInfo()
			}
			nc.Close()
			if jerr == nil {
				natsServer.url = machineNATS
				return
			}
		}
		dir, err := os.MkdirTemp("", natsDirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			natsServer.err = err
			return
		}
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			natsServer.err = err
			return
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			natsServer.err = fmt.Errorf("embedded nats-server not ready")
			return
		}
		natsServer.url = ns.ClientURL()
		t.Logf("using an embedded nats-server on %s (STRATA_TEST_NATS_EMBEDDED is set, or none with JetStream answered on %s)", natsServer.url, machineNATS)
	})
	if natsServer.err != nil {
		t.Fatalf("no NATS JetStream for the tests (none on %s, and the embedded one failed): %v", machineNATS, natsServer.err)
	}
	return natsServer.url
}

func sweepNATSDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), natsDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), natsDirPrefix), "-", 2)[0])
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// newTopic returns a topic of its own for a test (the NATS server may be
// shared with other test runs) and deletes its JetStream stream afterwards.
func newTopic(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = crand.Read(b)
	topic := "strata_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := nc.JetStream(); err == nil {
			_ = js.DeleteStream(topic)
		}
	})
	return topic
}

// genEvent is a generated event, in log order.
type genEvent struct {
	Tenant, Stream string
	Version        int64
	Type           string
	SchemaVersion  int
	Data           []byte
	Metadata       event.Metadata
}

// generate returns valid order histories of the given tenants, every event
// decided by the order aggregate, interleaved like concurrent traffic and
// cut to exactly n events (a prefix of an interleaving is itself valid).
// Events carry command, correlation and trace metadata.
func generate(seed uint64, tenants, n int) []genEvent {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	start := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	currencies := []string{"EUR", "USD", "GBP"}
	plan := func(i int) []genEvent {
		tenant := fmt.Sprintf("t-%d", i%tenants+1)
		id := fmt.Sprintf("o-%d", i/tenants+1)
		o := &order.Order{}
		at := start.Add(time.Duration(i) * 7 * time.Minute)
		step := func() time.Time { at = at.Add(time.Duration(1+rng.IntN(90)) * time.Minute); return at }
		var out []genEvent
		do := func(ps []event.Payload, err error) {
			if err != nil {
				panic(fmt.Sprintf("generate %s/%s: %v", tenant, id, err))
			}
			for _, p := range ps {
				if err := o.Apply(p); err != nil {
					panic(err)
				}
				typ, sv, data, err := order.Registry.Encode(p)
				if err != nil {
					panic(err)
				}
				corr := fmt.Sprintf("corr-%s-%s", tenant, id)
				out = append(out, genEvent{Tenant: tenant, Stream: order.StreamID(id), Version: o.Version, Type: typ, SchemaVersion: sv, Data: data,
					Metadata: event.Metadata{CommandID: uuid.NewString(), CorrelationID: corr, CausationID: corr, Actor: "user-" + tenant,
						TraceParent: fmt.Sprintf("00-%032x-%016x-01", rng.Uint64()|1, rng.Uint64()|1)}})
			}
		}
		cur := currencies[rng.IntN(len(currencies))]
		do(o.Create(id, fmt.Sprintf("c-%d", 1+rng.IntN(20)), cur, at))
		for k := 1 + rng.IntN(3); k > 0; k-- {
			p := 1 + rng.IntN(9)
			do(o.AddLine(fmt.Sprintf("p-%d", p), int64(1+rng.IntN(4)), money.Money{Amount: int64(100 * p), Currency: cur}, step()))
		}
		switch r := rng.IntN(10); {
		case r == 0:
		case r == 1:
			do(o.Cancel("changed my mind", step()))
		default:
			do(o.Place(step()))
			if rng.IntN(4) > 0 {
				do(o.Pay(fmt.Sprintf("pay-%s-%s", tenant, id), step()))
			}
		}
		return out
	}
	var out []genEvent
	var open [][]genEvent
	for next := 0; len(out) < n; {
		for len(open) < 40 {
			open = append(open, plan(next))
			next++
		}
		k := rng.IntN(len(open))
		out = append(out, open[k][0])
		if open[k] = open[k][1:]; len(open[k]) == 0 {
			open = append(open[:k], open[k+1:]...)
		}
	}
	return out
}

// eventID gives the i-th generated event a stable UUID.
func eventID(i int) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("strata-relay-test-%d", i))).String()
}

// seed inserts evs (the first of which is the from-th generated event) into
// the log as a superuser, in one transaction: fast, and the log's order is
// exactly evs' order.
func seed(ctx context.Context, conn *pgx.Conn, from int, evs []genEvent) error {
	ids := make([]string, len(evs))
	for i := range evs {
		ids[i] = eventID(from + i)
	}
	if err := seedIDs(ctx, conn, evs, ids); err != nil {
		return fmt.Errorf("seed events %d..%d: %w", from, from+len(evs), err)
	}
	return nil
}

// seedIDs is seed with the events' IDs given.
func seedIDs(ctx context.Context, conn *pgx.Conn, evs []genEvent, ids []string) error {
	n := len(evs)
	tenants, streams, types, datas, mds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, svs := make([]int64, n), make([]int32, n)
	for i, e := range evs {
		md, _ := json.Marshal(e.Metadata)
		tenants[i], streams[i], versions[i], types[i], svs[i], datas[i], mds[i] = e.Tenant, e.Stream, e.Version, e.Type, int32(e.SchemaVersion), string(e.Data), string(md)
	}
	_, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT tenant_id, stream_id, version, event_id::uuid, event_type, schema_version, data::jsonb, metadata::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[])
    WITH ORDINALITY AS e(tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, ord)
ORDER BY ord`, tenants, streams, versions, ids, types, svs, datas, mds)
	return err
}

func adminConn(ctx context.Context, t testing.TB, adminURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// shadow creates a copy of a read-model table for a broker-fed projection,
// with the same row-level security and grants.
func shadow(ctx context.Context, t testing.TB, conn *pgx.Conn, base, copy string) {
	t.Helper()
	for _, s := range []string{
		fmt.Sprintf(`CREATE TABLE strata.%s (LIKE strata.%s INCLUDING ALL)`, copy, base),
		fmt.Sprintf(`ALTER TABLE strata.%s ENABLE ROW LEVEL SECURITY`, copy),
		fmt.Sprintf(`ALTER TABLE strata.%s FORCE ROW LEVEL SECURITY`, copy),
		fmt.Sprintf(`CREATE POLICY %s_projector ON strata.%s TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true)) WITH CHECK (tenant_id = current_setting('app.tenant_id', true))`, copy, copy),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON strata.%s TO strata_projector`, copy),
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// rows renders a table's rows, sorted, one per line.
func rows(ctx context.Context, t testing.TB, conn *pgx.Conn, table string) string {
	t.Helper()
	var out *string
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(r::text, E'\n' ORDER BY r::text COLLATE "C") FROM strata.%s r`, table)).Scan(&out); err != nil {
		t.Fatalf("rows of %s: %v", table, err)
	}
	if out == nil {
		return ""
	}
	return *out
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamHeads returns, per tenant/stream, the last version of evs.
func streamHeads(evs []genEvent) map[string]int64 {
	out := map[string]int64{}
	for _, e := range evs {
		out[e.Tenant+"/"+e.Stream] = e.Version
	}
	return out
}

// appliedVersions reads relay_applied of a consumer as a superuser.
func appliedVersions(ctx context.Context, t testing.TB, conn *pgx.Conn, consumer string) map[string]int64 {
	t.Helper()
	rs, err := conn.Query(ctx, `SELECT tenant_id || '/' || stream_id, version FROM strata.relay_applied WHERE consumer = $1`, consumer)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rs.Next() {
		var k string
		var v int64
		if err := rs.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameVersions(want, got map[string]int64) bool {
	if len(want) != len(got) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// lastPosition is the position of the newest committed event, whether or
// not readers may see it yet (an older transaction may still be open
// somewhere in the cluster, which the tests share). ORDER BY names the
// table's columns: a bare tx_id would sort the text output column
// ("999" after "1000").
func lastPosition(ctx context.Context, t testing.TB, conn *pgx.Conn) event.Position {
	t.Helper()
	var major string
	var minor int64
	if err := conn.QueryRow(ctx, `SELECT tx_id::text, position FROM strata.events ORDER BY events.tx_id DESC, events.position DESC LIMIT 1`).Scan(&major, &minor); err != nil {
		t.Fatal(err)
	}
	m, err := strconv.ParseUint(major, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return event.Position{Major: m, Minor: uint64(minor)}
}

// tableDiff describes how two tables of the same shape differ: row counts
// and a few rows found in only one of them.
func tableDiff(ctx context.Context, t testing.TB, conn *pgx.Conn, want, got string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []struct{ label, sql string }{
		{"counts", fmt.Sprintf(`SELECT (SELECT count(*) FROM strata.%s)::text || ' vs ' || (SELECT count(*) FROM strata.%s)::text`, want, got)},
		{"only in " + want, fmt.Sprintf(`SELECT coalesce(string_agg(r::text, E'\n'), '') FROM (SELECT * FROM strata.%s EXCEPT SELECT * FROM strata.%s LIMIT 5) r`, want, got)},
		{"only in " + got, fmt.Sprintf(`SELECT coalesce(string_agg(r::text, E'\n'), '') FROM (SELECT * FROM strata.%s EXCEPT SELECT * FROM strata.%s LIMIT 5) r`, got, want)},
	} {
		var out string
		if err := conn.QueryRow(ctx, q.sql).Scan(&out); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
		fmt.Fprintf(&b, "%s:\n%s\n", q.label, out)
	}
	return b.String()
}

// natsPublisher returns the relay's JetStream publisher on url, closed
// when the test ends.
func natsPublisher(t testing.TB, url string) *NATSPublisher {
	t.Helper()
	pub, err := NewNATSPublisher(NATSConfig{URL: url, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}
