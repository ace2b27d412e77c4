package esdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Tags and append conditions on EventStoreDB (eventstore.TagReader).
//
// Tags travel in the event's metadata, as on every store. The index that
// finds them is a set of streams the adapter keeps beside the strata
// streams: one per (tenant, tag),
//
//	<namespace>.tag.<tenant>.<hex of 16 bytes of SHA-256 of the tag>
//
// outside the namespace's log filter (<namespace>-): the global log,
// projections and exports never see them, and naming.decode refuses them.
// The tag is hashed because KurrentDB's v2 API accepts only
// [A-Za-z0-9_.-] in stream names, and a tag may hold any printable text.
// Every append of tagged events writes, in the same AppendRecords
// transaction, right after each event one marker per tag of it to that
// tag's stream (tagMarker: the event's stream, version, ID, type and
// tags), so a query's types and multi-tag items are matched on the
// markers alone, without reading the events.
//
// Positions. Every tagged append also writes, last in its transaction,
// one record to the tenant's tag log (<namespace>.tags.<tenant>, also
// outside the log filter). ReadTagged reads the tag log's tail first, and
// returns its position: every append committed before that read has all
// its records at or before it, and is seen by the tag stream reads that
// follow; every append committed after it has all its records after it
// (KurrentDB writes one log in commit order, a transaction's records
// together, in the request's order). So the read keeps the markers at or
// before that position (later ones are the next read's), its events sit
// before their markers, and any matching append after the read sits after
// the position: exact, whatever runs concurrently, with stream reads only.
// The largest position of the markers read would not do: a marker
// committed on the first tag after its read can sit before a marker of the
// second tag read later (TestFakeServerReadTaggedPositionIsExact shows
// it). Nor would $all's head: a backwards read of $all starts at the
// writer's checkpoint, which may be ahead of what stream reads show. The
// cost is one small record per tagged append and one read per ReadTagged.
//
// Conditions. An append conditioned on (query, after) first reads, for
// each tag of the query, its stream's markers after `after` (backwards from
// the tail): one that matches the query fails the append at once
// (ErrConditionFailed). Otherwise the append carries a consistency check
// pinning each of those tag streams at the revision just read, so a
// tagged append committed in between fails the whole append atomically
// (ErrConditionFailed: read again, decide again). A concurrent append
// whose markers do not match the query (another type, or only part of a
// multi-tag item) also moves the tag stream: such spurious failures are
// possible, and resolved by the caller's retry. The price is one stream
// read per tag of the condition, before the append.

var _ eventstore.TagReader = (*Store)(nil)

// markerType is the event type of the markers in the tag streams.
const markerType = "strata.tag"

// tagMarker is the data of a marker: enough to fetch the event and to
// match a query without fetching it. Field names are a stored format.
type tagMarker struct {
	Stream  string   `json:"stream"`
	Version int64    `json:"version"`
	ID      string   `json:"id"`
	Type    string   `json:"type"`
	Tags    []string `json:"tags"`
}

// markerAt is a marker read back, with its place.
type markerAt struct {
	tagMarker
	rev uint64
	pos event.Position
}

// tagStream returns the name of the stream indexing tenant's events that
// carry tag. The name starts with the namespace and a '.', which no
// namespace's log filter (<namespace>-) matches.
func (n naming) tagStream(tenant, tag string) string {
	sum := sha256.Sum256([]byte("strata-tag-stream/v1\x00" + tag))
	return n.ns + ".tag." + tenant + "." + hex.EncodeToString(sum[:16])
}

// tagLog returns the name of tenant's tag log, to which every tagged
// append writes one record after all its events and markers.
func (n naming) tagLog(tenant string) string {
	return n.ns + ".tags." + tenant
}

// tagLogType is the event type of the tag log's records.
const tagLogType = "strata.tagged"

// markerID is the record ID of the marker of event id in tag's stream:
// derived from both, so a retried append proposes the same markers.
func markerID(id uuid.UUID, tag string) uuid.UUID {
	return uuid.NewSHA1(id, []byte("strata-tag-marker/v1\x00"+tag))
}

// normalizeTags stores every event's tags in their normal form (sorted,
// once each) and refuses invalid ones. It reports whether any event
// carries tags.
func normalizeTags(events []eventstore.NewEvent) (tagged bool, err error) {
	for i := range events {
		if len(events[i].Metadata.Tags) == 0 {
			continue
		}
		norm, err := event.NormalizeTags(events[i].Metadata.Tags)
		if err != nil {
			return false, fmt.Errorf("%w: event %s: %w", ErrInvalidAppend, events[i].ID, err)
		}
		events[i].Metadata.Tags = norm
		tagged = tagged || len(norm) > 0
	}
	return tagged, nil
}

// ReadTagged implements eventstore.TagReader.
func (s *Store) ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error) {
	if tenant == "" {
		return nil, event.Position{}, eventstore.ErrNoTenant
	}
	if err := q.Validate(); err != nil {
		return nil, event.Position{}, fmt.Errorf("read tagged events: %w: %w", ErrInvalidAppend, err)
	}
	if !tenantPattern.MatchString(tenant) {
		return nil, event.Position{}, fmt.Errorf("read tagged events: %w: tenant %q", ErrInvalidName, tenant)
	}
	op := "read tagged events of " + tenant
	// The tenant's tag log first: its tail is the read's position.
	_, at, err := s.tail(ctx, op, s.names.tagLog(tenant))
	if err != nil {
		return nil, event.Position{}, err
	}
	var marks []markerAt
	for _, tag := range q.Tags() {
		ms, err := s.readMarkers(ctx, op, s.names.tagStream(tenant, tag), esdb.Forwards, esdb.Start{}, math.MaxInt64)
		if err != nil {
			return nil, event.Position{}, err
		}
		for _, m := range ms {
			// Markers after the position belong to appends committed
			// after the tag log was read: they are the next read's.
			if slices.Contains(m.Tags, tag) && !at.Less(m.pos) {
				marks = append(marks, m)
			}
		}
	}
	seen := map[string]bool{}
	var refs []markerAt
	for _, m := range marks {
		if q.Matches(m.Type, m.Tags) && !seen[m.ID] {
			seen[m.ID] = true
			refs = append(refs, m)
		}
	}
	recs := make([]event.Record, 0, len(refs))
	for _, m := range refs {
		rec, err := s.fetchMarked(ctx, op, tenant, m)
		if err != nil {
			return nil, event.Position{}, err
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b event.Record) int { return a.Position.Compare(b.Position) })
	return recs, at, nil
}

// fetchMarked reads the event a marker names.
func (s *Store) fetchMarked(ctx context.Context, op, tenant string, m markerAt) (event.Record, error) {
	name, err := s.names.encode(tenant, m.Stream)
	if err != nil || m.Version < 1 {
		return event.Record{}, fmt.Errorf("%s: marker %d names %s/%d: %w", op, m.rev, m.Stream, m.Version, errBadMetadata)
	}
	var rec event.Record
	err = s.conn.call(ctx, op, func(c *esdb.Client) error {
		rs, err := c.ReadStream(ctx, name, esdb.ReadStreamOptions{From: esdb.Revision(uint64(m.Version - 1))}, 1)
		if err != nil {
			return err
		}
		defer rs.Close()
		ev, err := rs.Recv()
		if err != nil {
			return err
		}
		r, ok, err := s.names.record(ev.OriginalEvent())
		if err != nil {
			return err
		}
		if !ok || r.Tenant != tenant || r.ID != m.ID || r.Version != m.Version {
			return fmt.Errorf("the tag index names event %s as %s/%d, which holds %s", m.ID, m.Stream, m.Version, r.ID)
		}
		rec = r
		return nil
	})
	return rec, err
}

// readMarkers reads up to count markers of a tag stream from `from` in
// direction dir (an empty list for a stream that does not exist). The
// caller leaves out those that do not carry the stream's tag (two tags
// whose hashes collide would share a stream).
func (s *Store) readMarkers(ctx context.Context, op, name string, dir esdb.Direction, from esdb.StreamPosition, count uint64) ([]markerAt, error) {
	var out []markerAt
	err := s.eachEvent(ctx, op, name, dir, from, count, func(e *esdb.RecordedEvent) (bool, error) {
		var m tagMarker
		if e.EventType != markerType {
			return false, fmt.Errorf("event %d of %s: %w: type %q in a tag stream", e.EventNumber, name, errBadMetadata, e.EventType)
		}
		if err := json.Unmarshal(e.Data, &m); err != nil {
			return false, fmt.Errorf("event %d of %s: %w: %v", e.EventNumber, name, errBadMetadata, err)
		}
		pos := positionOf(e.Position)
		if pos.IsZero() {
			return false, errNoPositions
		}
		out = append(out, markerAt{tagMarker: m, rev: e.EventNumber, pos: pos})
		return true, nil
	})
	return out, err
}

// tail returns the revision (-1 when it has none) and the $all position
// (zero) of a stream's last event.
func (s *Store) tail(ctx context.Context, op, name string) (rev int64, pos event.Position, err error) {
	rev = -1
	err = s.eachEvent(ctx, op, name, esdb.Backwards, esdb.End{}, 1, func(e *esdb.RecordedEvent) (bool, error) {
		rev = int64(e.EventNumber)
		if pos = positionOf(e.Position); pos.IsZero() {
			return false, errNoPositions
		}
		return false, nil
	})
	return rev, pos, err
}

// tagCheck pins a tag stream at the revision a condition's check read
// (-1: no stream).
type tagCheck struct {
	stream string
	rev    int64
}

// checkCondition reads, for each tag of c's query, the markers after
// c.After. held is false when one of them matches the query; otherwise
// checks pin every tag stream at the revision read.
func (s *Store) checkCondition(ctx context.Context, op, tenant string, c *eventstore.AppendCondition) (checks []tagCheck, held bool, err error) {
	for _, tag := range c.Query.Tags() {
		name := s.names.tagStream(tenant, tag)
		tail := int64(-1)
		from := esdb.StreamPosition(esdb.End{})
		const page = 32
	pages:
		for {
			ms, err := s.readMarkers(ctx, op, name, esdb.Backwards, from, page)
			if err != nil {
				return nil, false, err
			}
			for i, m := range ms {
				if i == 0 && tail < 0 {
					tail = int64(m.rev)
				}
				if !c.After.Less(m.pos) {
					break pages
				}
				if slices.Contains(m.Tags, tag) && c.Query.Matches(m.Type, m.Tags) {
					return nil, false, nil
				}
			}
			if len(ms) < page || ms[len(ms)-1].rev == 0 {
				break
			}
			from = esdb.Revision(ms[len(ms)-1].rev - 1)
		}
		checks = append(checks, tagCheck{stream: name, rev: tail})
	}
	return checks, true, nil
}
