package esdb

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

func TestExpectedRevision(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   eventstore.ExpectedVersion
		want esdb.ExpectedRevision
	}{
		{eventstore.Any, esdb.Any{}},
		{eventstore.NoStream, esdb.NoStream{}},
		{eventstore.StreamExists, esdb.StreamExists{}},
		{eventstore.Exact(0), esdb.NoStream{}}, // empty stream: no event yet
		{eventstore.Exact(1), esdb.Revision(0)},
		{eventstore.Exact(2), esdb.Revision(1)},
		{eventstore.Exact(1 << 40), esdb.Revision(1<<40 - 1)},
	}
	for _, c := range cases {
		got, err := expectedRevision(c.in)
		if err != nil || got != c.want {
			t.Errorf("expectedRevision(%s) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []eventstore.ExpectedVersion{-4, -100} {
		if got, err := expectedRevision(bad); !errors.Is(err, ErrInvalidAppend) {
			t.Errorf("expectedRevision(%d) = %#v, %v; want ErrInvalidAppend", bad, got, err)
		}
	}
}

func TestVersionsAndRevisions(t *testing.T) {
	t.Parallel()
	for rev := uint64(0); rev < 5; rev++ {
		v := versionOf(rev)
		if v != int64(rev)+1 {
			t.Fatalf("versionOf(%d) = %d", rev, v)
		}
		// Reading after version v starts at the next event: revision v.
		if got := readFrom(v); got != esdb.Revision(uint64(v)) {
			t.Fatalf("readFrom(%d) = %#v", v, got)
		}
		// An exact expectation of version v names revision v-1, the event
		// that versionOf maps to v.
		if got, _ := expectedRevision(eventstore.Exact(v)); got != esdb.Revision(rev) {
			t.Fatalf("expected version %d = %#v, want revision %d", v, got, rev)
		}
	}
	for _, after := range []int64{0, -1} {
		if got := readFrom(after); got != (esdb.Start{}) {
			t.Fatalf("readFrom(%d) = %#v, want Start", after, got)
		}
	}
}

func TestPositions(t *testing.T) {
	t.Parallel()
	p := positionOf(esdb.Position{Commit: 1200, Prepare: 1100})
	if p != (event.Position{Major: 1200, Minor: 1100}) {
		t.Fatalf("positionOf = %v", p)
	}
	if got := allFrom(p); got != (esdb.Position{Commit: 1200, Prepare: 1100}) {
		t.Fatalf("allFrom(%v) = %#v", p, got)
	}
	if got := positionOf(esdb.Position{Commit: math.MaxUint64, Prepare: math.MaxUint64}); !got.IsZero() {
		t.Fatalf("no position (stream reads before 22.6) = %v, want zero", got)
	}
	if got := allFrom(event.Position{}); got != (esdb.Start{}) {
		t.Fatalf("allFrom(zero) = %#v, want Start", got)
	}
	// $all orders by commit, then prepare: so does event.Position.
	a := positionOf(esdb.Position{Commit: 10, Prepare: 10})
	b := positionOf(esdb.Position{Commit: 20, Prepare: 5})
	c := positionOf(esdb.Position{Commit: 20, Prepare: 15})
	if !a.Less(b) || !b.Less(c) {
		t.Fatalf("order %v < %v < %v does not hold", a, b, c)
	}
	// The token round-trips through the port's encoding.
	if q, err := event.ParseToken(c.Token()); err != nil || q != c {
		t.Fatalf("token round trip: %v, %v", q, err)
	}
	for _, cp := range []struct {
		p  esdb.Position
		ok bool
	}{
		{esdb.Position{Commit: 500, Prepare: 500}, true},
		{esdb.Position{Commit: 500, Prepare: 400}, true},
		{esdb.Position{}, true},
		{esdb.Position{Commit: 500, Prepare: 0}, false},   // KurrentDB < 25.0.1 end-of-log checkpoint
		{esdb.Position{Commit: 400, Prepare: 500}, false}, // impossible
	} {
		if got := plausibleCheckpoint(cp.p); got != cp.ok {
			t.Errorf("plausibleCheckpoint(%+v) = %v", cp.p, got)
		}
	}
}

func testMetadata() event.Metadata {
	return event.Metadata{
		CommandID:     "cmd-1",
		CorrelationID: "corr-1",
		CausationID:   "cause-1",
		Actor:         "user-1",
		TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:    "k=v",
		Tags:          []string{"email:a", "seat:12A"},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []event.Metadata{testMetadata(), {}} {
		b, err := encodeMetadata("t-a", 3, m)
		if err != nil {
			t.Fatal(err)
		}
		tenant, sv, got, err := decodeMetadata(b)
		if err != nil || tenant != "t-a" || sv != 3 || !reflect.DeepEqual(got, m) {
			t.Fatalf("decode(%s) = %q, %d, %+v, %v", b, tenant, sv, got, err)
		}
	}
}

func TestMetadataWireFormat(t *testing.T) {
	t.Parallel()
	b, err := encodeMetadata("t-a", 1, testMetadata())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"tenant": "t-a", "schema_version": float64(1),
		"command_id": "cmd-1", "correlation_id": "corr-1", "causation_id": "cause-1", "actor": "user-1",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "k=v", "tags": []any{"email:a", "seat:12A"},
		"$correlationId": "corr-1", "$causationId": "cause-1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("metadata JSON\n got %v\nwant %v", got, want)
	}
}

// TestMetadataFieldsDoNotCollide: a field added to event.Metadata must not
// take one of the adapter's own names, or it would silently vanish from
// the stored JSON (encoding/json drops conflicting embedded fields).
func TestMetadataFieldsDoNotCollide(t *testing.T) {
	t.Parallel()
	own := map[string]bool{"tenant": true, "schema_version": true, "$correlationId": true, "$causationId": true}
	typ := reflect.TypeOf(event.Metadata{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || own[name] {
			t.Errorf("event.Metadata.%s has JSON name %q, which the esdb metadata uses or cannot carry", typ.Field(i).Name, name)
		}
	}
}

func TestDecodeMetadataRejects(t *testing.T) {
	t.Parallel()
	for _, b := range []string{
		``, `null`, `[]`, `{`, `{"schema_version":1}`, `{"tenant":"t-a"}`,
		`{"tenant":"t-a","schema_version":0}`, `{"tenant":"","schema_version":1}`,
		`{"tenant":1,"schema_version":1}`,
	} {
		if _, _, _, err := decodeMetadata([]byte(b)); !errors.Is(err, errBadMetadata) {
			t.Errorf("decodeMetadata(%s): %v, want errBadMetadata", b, err)
		}
	}
	// Unknown fields (a newer writer) are ignored.
	if tenant, _, _, err := decodeMetadata([]byte(`{"tenant":"t","schema_version":2,"later":true}`)); err != nil || tenant != "t" {
		t.Errorf("unknown field: %q, %v", tenant, err)
	}
}

func TestEventData(t *testing.T) {
	t.Parallel()
	id := "0b6c2a8e-3a5b-4c1d-9e2f-1a2b3c4d5e6f"
	d, err := eventData("t-a", eventstore.NewEvent{ID: id, Type: "order.placed", SchemaVersion: 2, Data: []byte(`{"a":1}`), Metadata: testMetadata()})
	if err != nil {
		t.Fatal(err)
	}
	if d.EventID != uuid.MustParse(id) || d.EventType != "order.placed" || d.ContentType != esdb.ContentTypeJson || string(d.Data) != `{"a":1}` {
		t.Fatalf("event data %+v", d)
	}
	tenant, sv, m, err := decodeMetadata(d.Metadata)
	if err != nil || tenant != "t-a" || sv != 2 || !reflect.DeepEqual(m, testMetadata()) {
		t.Fatalf("metadata %s: %q %d %+v %v", d.Metadata, tenant, sv, m, err)
	}
	for _, e := range []eventstore.NewEvent{
		{ID: "", Type: "x", SchemaVersion: 1, Data: []byte(`{}`)},
		{ID: "not-a-uuid", Type: "x", SchemaVersion: 1, Data: []byte(`{}`)},
		{ID: "0b6c2a8e3a5b4c1d9e2f1a2b3c4d5e6f", Type: "x", SchemaVersion: 1, Data: []byte(`{}`)}, // no dashes
		{ID: "{" + id + "}", Type: "x", SchemaVersion: 1, Data: []byte(`{}`)},
		{ID: id, Type: "", SchemaVersion: 1, Data: []byte(`{}`)},
		{ID: id, Type: "x", SchemaVersion: 0, Data: []byte(`{}`)},
		{ID: id, Type: "x", SchemaVersion: 1, Data: nil},
		{ID: id, Type: "x", SchemaVersion: 1, Data: []byte(`{"a":`)},
	} {
		if _, err := eventData("t-a", e); !errors.Is(err, ErrInvalidAppend) {
			t.Errorf("eventData(%+v): %v, want ErrInvalidAppend", e, err)
		}
	}
}

func recorded(t *testing.T, stream string, number uint64, tenant string) *esdb.RecordedEvent {
	t.Helper()
	meta, err := encodeMetadata(tenant, 1, testMetadata())
	if err != nil {
		t.Fatal(err)
	}
	return &esdb.RecordedEvent{
		EventID:      uuid.MustParse("0b6c2a8e-3a5b-4c1d-9e2f-1a2b3c4d5e6f"),
		EventType:    "order.placed",
		ContentType:  "application/json",
		StreamID:     stream,
		EventNumber:  number,
		Position:     esdb.Position{Commit: 9000, Prepare: 9000},
		CreatedDate:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Data:         []byte(`{"x":1}`),
		UserMetadata: meta,
	}
}

func TestRecord(t *testing.T) {
	t.Parallel()
	n, _ := newNaming("strata")
	rec, ok, err := n.record(recorded(t, "strata-t-a.order-1", 4, "t-a"))
	if err != nil || !ok {
		t.Fatalf("record: %v, %v", ok, err)
	}
	want := event.Record{
		ID: "0b6c2a8e-3a5b-4c1d-9e2f-1a2b3c4d5e6f", Tenant: "t-a", Stream: "order-1", Version: 5,
		Type: "order.placed", SchemaVersion: 1, Data: json.RawMessage(`{"x":1}`), Metadata: testMetadata(),
		RecordedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Position: event.Position{Major: 9000, Minor: 9000},
	}
	if !reflect.DeepEqual(rec, want) {
		t.Fatalf("record\n got %+v\nwant %+v", rec, want)
	}

	// Streams outside the namespace are not ours: skipped without error.
	for _, stream := range []string{"other-t-a.order-1", "$$strata-t-a.order-1", "strata-ping", "$stats-127.0.0.1:2113"} {
		if _, ok, err := n.record(recorded(t, stream, 0, "t-a")); ok || err != nil {
			t.Errorf("record(%s) = %v, %v; want skipped", stream, ok, err)
		}
	}

	// A strata stream whose metadata names another tenant is refused.
	if _, ok, err := n.record(recorded(t, "strata-t-a.order-1", 0, "t-b")); !ok || !errors.Is(err, errBadMetadata) {
		t.Errorf("tenant mismatch: %v, %v; want errBadMetadata", ok, err)
	}
	bad := recorded(t, "strata-t-a.order-1", 0, "t-a")
	bad.UserMetadata = []byte(`{}`)
	if _, _, err := n.record(bad); !errors.Is(err, errBadMetadata) {
		t.Errorf("empty metadata: %v; want errBadMetadata", err)
	}
	bad = recorded(t, "strata-t-a.order-1", 0, "t-a")
	bad.ContentType = "application/octet-stream"
	if _, _, err := n.record(bad); !errors.Is(err, errBadMetadata) {
		t.Errorf("binary event: %v; want errBadMetadata", err)
	}
}
