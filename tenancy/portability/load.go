package portability

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// The load (the second pass) writes in bounded transactions, each
// committed: a transaction that writes holds an xid, and every reader of
// the global log stops below the oldest xid still running (ARCHITECTURE
// decision 1), so an import in one transaction held every tenant's
// projections, relay and consistency waits for its whole run (issue 29,
// finding 5: 32 s for a gzip bomb). A batch is at most loadBatchEvents
// events or loadBatchBytes of data and metadata: milliseconds.
const (
	loadBatchEvents = 1000
	loadBatchBytes  = 4 << 20
)

// loader is the second pass: it appends the events after the first skip
// (already there from an earlier run) and inserts the idempotency records.
type loader struct {
	s      *Service
	ctx    context.Context
	tenant domain.TenantID
	ids    ids
	skip   int64 // events already loaded
	total  int64
	known  bool // the tenant is in the directory (checked between batches)

	seen, loaded                      int64 // events read, events written (this run)
	streams, evIDs, types, data, meta []string
	versions                          []int64
	schemas                           []int32
	at                                []time.Time
	bytes                             int

	keys, hashes []string
	responses    [][]byte
	created      []time.Time
	records      int64

	events, idem bool // files read

	// streamKeys holds the key of each stream's data subject, once an
	// event of the stream was sealed (seal).
	streamKeys map[string]string
}

func (l *loader) event(ev *checkedEvent) error {
	l.seen++
	if l.seen <= l.skip {
		return nil
	}
	line := &ev.line
	meta, err := l.ids.metadata(line.Metadata, ev.meta)
	if err != nil {
		return err
	}
	data, err := l.seal(line)
	if err != nil {
		return err
	}
	l.streams, l.versions, l.evIDs, l.types = append(l.streams, line.Stream), append(l.versions, line.Version), append(l.evIDs, l.ids.of(ev.id).String()), append(l.types, line.Type)
	l.schemas, l.data, l.meta, l.at = append(l.schemas, int32(line.SchemaVersion)), append(l.data, string(data)), append(l.meta, string(meta)), append(l.at, line.RecordedAt)
	l.bytes += len(data) + len(meta)
	if len(l.evIDs) >= loadBatchEvents || l.bytes >= loadBatchBytes {
		return l.flushEvents()
	}
	return nil
}

// flushEvents appends the batch in a transaction of its own, as
// strata_app under the tenant's row-level security, and commits it.
func (l *loader) flushEvents() error {
	if len(l.evIDs) == 0 {
		return nil
	}
	if err := l.stillWanted(); err != nil {
		return err
	}
	first := l.skip + l.loaded + 1
	err := tenantTx(l.ctx, l.s.cfg.App, db.RoleApp, l.tenant, false, func(tx pgx.Tx) error {
		_, err := tx.Exec(l.ctx, `INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at)
SELECT $1, u.stream_id, u.version, u.event_id::uuid, u.event_type, u.schema_version, u.data::jsonb, u.metadata::jsonb, u.recorded_at
FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[], $9::timestamptz[])
     WITH ORDINALITY AS u(stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at, ord)
ORDER BY u.ord`, l.tenant, l.streams, l.versions, l.evIDs, l.types, l.schemas, l.data, l.meta, l.at)
		return err
	})
	if err != nil {
		return fmt.Errorf("append events %d to %d: %w", first, first+int64(len(l.evIDs))-1, err)
	}
	l.loaded += int64(len(l.evIDs))
	l.streams, l.evIDs, l.types, l.data, l.meta = l.streams[:0], l.evIDs[:0], l.types[:0], l.data[:0], l.meta[:0]
	l.versions, l.schemas, l.at, l.bytes = l.versions[:0], l.schemas[:0], l.at[:0], 0
	l.s.progress(Progress{Phase: "events", File: EventsFile, Rows: l.skip + l.loaded, Total: l.total})
	return nil
}

func (l *loader) idempotency(r *IdempotencyLine) error {
	l.keys, l.hashes, l.responses, l.created = append(l.keys, r.Key), append(l.hashes, r.RequestHash), append(l.responses, r.Response), append(l.created, r.CreatedAt)
	if len(l.keys) >= loadBatchEvents {
		return l.flushIdempotency()
	}
	return nil
}

// flushIdempotency inserts a batch of records in a transaction of its
// own. A record already there (an earlier run wrote it) is left as it is.
func (l *loader) flushIdempotency() error {
	if len(l.keys) == 0 {
		return nil
	}
	if err := l.stillWanted(); err != nil {
		return err
	}
	err := tenantTx(l.ctx, l.s.cfg.App, db.RoleApp, l.tenant, false, func(tx pgx.Tx) error {
		_, err := tx.Exec(l.ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response, created_at)
SELECT $1, u.key, u.request_hash, u.response, u.created_at FROM unnest($2::text[], $3::text[], $4::bytea[], $5::timestamptz[]) AS u(key, request_hash, response, created_at)
ON CONFLICT (tenant_id, key) DO NOTHING`, l.tenant, l.keys, l.hashes, l.responses, l.created)
		return err
	})
	if err != nil {
		return fmt.Errorf("insert idempotency records %d to %d: %w", l.records+1, l.records+int64(len(l.keys)), err)
	}
	l.records += int64(len(l.keys))
	l.keys, l.hashes, l.responses, l.created = l.keys[:0], l.hashes[:0], l.responses[:0], l.created[:0]
	l.s.progress(Progress{Phase: "idempotency", File: IdempotencyFile, Rows: l.records})
	return nil
}

// stillWanted stops the load of a tenant the directory has since marked
// for erasure: the erasure waits for the import's lock, so the sooner the
// import lets go, the sooner it proceeds.
func (l *loader) stillWanted() error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	if !l.known {
		return nil
	}
	status, _, _, err := l.s.directoryEntry(l.ctx, l.tenant)
	if err != nil {
		return err
	}
	if status == "erasing" || status == "erased" {
		return fmt.Errorf("%w: tenant %s is %s: the import stopped", domain.ErrRejected, l.tenant, status)
	}
	return nil
}

func (l *loader) fileDone(name string) error {
	switch name {
	case EventsFile:
		l.events = true
		return l.flushEvents()
	case IdempotencyFile:
		l.idem = true
		return l.flushIdempotency()
	}
	return nil
}

func (l *loader) done() bool { return l.events && l.idem }

// seal seals the personal fields of an imported event with the keys of
// its subjects in the tenant it is imported as: an archive holds them
// opened (Service.open), and a key is the tenant's own.
func (l *loader) seal(line *EventLine) ([]byte, error) {
	reg := l.s.cfg.Registry
	if reg == nil {
		return line.Data, nil
	}
	data, err := reg.Seal(l.ctx, string(l.tenant), line.Stream, line.Type, line.Data, func() (string, error) {
		if id, ok := l.streamKeys[line.Stream]; ok {
			return id, nil
		}
		return l.storedStreamKey(line.Stream)
	})
	if err != nil {
		return nil, fmt.Errorf("event %d (%s v%d of %s): %w", line.Ordinal, line.Type, line.Version, line.Stream, err)
	}
	if _, ok := l.streamKeys[line.Stream]; !ok {
		if id := event.SealedKey(data); id != "" {
			if l.streamKeys == nil {
				l.streamKeys = map[string]string{}
			}
			l.streamKeys[line.Stream] = id
		}
	}
	return data, nil
}

// storedStreamKey finds the subject key of a stream whose first events an
// earlier run of the import wrote.
func (l *loader) storedStreamKey(stream string) (string, error) {
	var types, datas []string
	err := tenantTx(l.ctx, l.s.cfg.App, db.RoleApp, l.tenant, false, func(tx pgx.Tx) error {
		rows, err := tx.Query(l.ctx, `SELECT event_type, data::text FROM events WHERE tenant_id = $1 AND stream_id = $2 ORDER BY version`, l.tenant, stream)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var typ, data string
			if err := rows.Scan(&typ, &data); err != nil {
				return err
			}
			types, datas = append(types, typ), append(datas, data)
		}
		return rows.Err()
	})
	if err != nil {
		return "", err
	}
	return l.s.cfg.Registry.StreamKey(l.ctx, string(l.tenant), func(yield func(string, []byte) bool) {
		for i := range types {
			if !yield(types[i], []byte(datas[i])) {
				return
			}
		}
	})
}
