package projectiontest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Recorded is one event of a recorded history (a testdata/*.jsonl line), in
// log order: what a projection sees of an event, without positions (the log
// assigns them when the history is seeded or appended).
type Recorded struct {
	Tenant        string          `json:"tenant"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
}

// Load reads a recorded history, one JSON event per line.
func Load(t testing.TB, path string) []Recorded {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Recorded
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r Recorded
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Write stores a recorded history, one JSON event per line (-rewrite).
func Write(t testing.TB, path string, evs []Recorded) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Append appends evs through the store, as the write side would:
// consecutive events of one stream go in one append, each expecting the
// version before its first event.
func Append(ctx context.Context, s eventstore.Store, evs []Recorded) (event.Position, error) {
	var last event.Position
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Tenant == evs[i].Tenant && evs[j].Stream == evs[i].Stream {
			j++
		}
		req := eventstore.AppendRequest{Tenant: evs[i].Tenant, Stream: evs[i].Stream, Expected: eventstore.Exact(evs[i].Version - 1)}
		for _, e := range evs[i:j] {
			req.Events = append(req.Events, eventstore.NewEvent{ID: uuid.NewString(), Type: e.Type, SchemaVersion: e.SchemaVersion, Data: e.Data})
		}
		res, err := s.Append(ctx, req)
		if err != nil {
			return last, fmt.Errorf("append %s/%s v%d: %w", evs[i].Tenant, evs[i].Stream, evs[i].Version, err)
		}
		last = res.Position
		i = j
	}
	return last, nil
}

// EventID gives the i-th seeded event a stable UUID.
func EventID(i int) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("strata-test-event-%d", i))).String()
}

// Seed inserts evs into the log as a superuser, chunk events per statement
// and transaction: fast, and the log's order is exactly evs' order.
func Seed(ctx context.Context, adminURL string, evs []Recorded, chunk int) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for lo := 0; lo < len(evs); lo += chunk {
		hi := min(lo+chunk, len(evs))
		n := hi - lo
		tenants, streams, ids, types, datas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions, svs := make([]int64, n), make([]int32, n)
		for i, e := range evs[lo:hi] {
			tenants[i], streams[i], versions[i], ids[i], types[i], svs[i], datas[i] = e.Tenant, e.Stream, e.Version, EventID(lo+i), e.Type, int32(e.SchemaVersion), string(e.Data)
		}
		_, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
SELECT tenant_id, stream_id, version, event_id::uuid, event_type, schema_version, data::jsonb, '{}'::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[])
    WITH ORDINALITY AS e(tenant_id, stream_id, version, event_id, event_type, schema_version, data, ord)
ORDER BY ord`, tenants, streams, versions, ids, types, svs, datas)
		if err != nil {
			return fmt.Errorf("seed events %d..%d: %w", lo, hi, err)
		}
	}
	return nil
}

// MustSeed is Seed failing the test on an error.
func MustSeed(ctx context.Context, t testing.TB, adminURL string, evs []Recorded, chunk int) {
	t.Helper()
	if err := Seed(ctx, adminURL, evs, chunk); err != nil {
		t.Fatal(err)
	}
}
