package portability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/placement"
)

// EventLine is one line of events.jsonl: an event as the log stores it,
// without what belongs to the source database (the global position and
// transaction ID). Ordinal is the event's place in the tenant's log order,
// from 1.
type EventLine struct {
	Ordinal       int64           `json:"ordinal"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	EventID       string          `json:"event_id"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
	Metadata      json.RawMessage `json:"metadata"`
	RecordedAt    time.Time       `json:"recorded_at"`
}

// IdempotencyLine is one line of idempotency.jsonl: a command's recorded
// outcome under its Idempotency-Key. Response is the stored answer, bytes
// as they are (base64 in JSON).
type IdempotencyLine struct {
	Key         string    `json:"key"`
	RequestHash string    `json:"request_hash"`
	Response    []byte    `json:"response"`
	CreatedAt   time.Time `json:"created_at"`
}

// Export writes tenant's archive to w and returns its manifest. The
// tenant must be in the directory (any status but erased).
func (s *Service) Export(ctx context.Context, tenant domain.TenantID, w io.Writer) (Manifest, error) {
	status, placedIn, ok, err := s.directoryEntry(ctx, tenant)
	if err != nil {
		return Manifest{}, err
	}
	if !ok {
		return Manifest{}, fmt.Errorf("%w: no tenant %q in the directory", domain.ErrNotFound, tenant)
	}
	if status == "erased" {
		return Manifest{}, fmt.Errorf("%w: tenant %s is erased: there is nothing to export", domain.ErrRejected, tenant)
	}
	if placedIn != placement.Pool {
		return Manifest{}, fmt.Errorf("%w: tenant %s is placed in %s; exporting a tenant outside the shared database is not supported yet", domain.ErrRejected, tenant, placedIn)
	}
	if err := s.audit(ctx, "export", tenant, map[string]any{"status": status}); err != nil {
		return Manifest{}, err
	}
	var m Manifest
	var dir string
	for attempt := 1; ; attempt++ {
		if dir, err = os.MkdirTemp("", "strata-export-"); err != nil {
			return Manifest{}, err
		}
		defer os.RemoveAll(dir)
		m, err = s.stage(ctx, tenant, dir)
		var ahead *aheadError
		if errors.As(err, &ahead) && attempt < stageAttempts {
			moved, cerr := s.logHas(ctx, tenant, ahead.pos)
			if cerr != nil {
				return Manifest{}, cerr
			}
			if moved {
				continue // the tenant was written between the two snapshots: again
			}
		}
		if err != nil {
			return Manifest{}, err
		}
		break
	}
	m.Export.TenantStatus, m.Export.Source.Placement = status, placedIn
	if err := s.cfg.Owner.QueryRow(ctx, `SELECT current_database()`).Scan(&m.Export.Source.Database); err != nil {
		return Manifest{}, err
	}
	if err := writeArchive(w, dir, m); err != nil {
		return Manifest{}, fmt.Errorf("write the archive: %w", err)
	}
	return m, nil
}

// stage writes every file of tenant's archive into dir.
func (s *Service) stage(ctx context.Context, tenant domain.TenantID, dir string) (Manifest, error) {
	m := Manifest{Format: Format, FormatVersion: FormatVersion, Tenant: tenant, Files: map[string]FileEntry{},
		Export: ExportInfo{CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}}
	ordinals := map[int64]int64{}   // position -> ordinal
	byEventID := map[string]int64{} // event_id -> ordinal
	var head position
	var events int64
	// The log and the idempotency records, in one snapshot, as strata_app.
	err := tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1`, s.filter(tenant)).Scan(&events); err != nil {
			return err
		}
		ev, err := newJSONL(dir, EventsFile)
		if err != nil {
			return err
		}
		// The text of tx_id under another name: ORDER BY tx_id would
		// otherwise name the output column and sort its text ("10" before
		// "9").
		rows, err := tx.Query(ctx, `SELECT tx_id::text AS tx_text, position, stream_id, version, event_id::text, event_type, schema_version, data::text, metadata::text, recorded_at
FROM events WHERE tenant_id = $1 ORDER BY tx_id, position`, s.filter(tenant))
		if err != nil {
			return err
		}
		var l EventLine
		var data, meta string
		for rows.Next() {
			if err := rows.Scan(&head.tx, &head.pos, &l.Stream, &l.Version, &l.EventID, &l.Type, &l.SchemaVersion, &data, &meta, &l.RecordedAt); err != nil {
				rows.Close()
				return err
			}
			l.Ordinal++
			ordinals[head.pos], byEventID[l.EventID] = l.Ordinal, l.Ordinal
			l.Data, l.Metadata, l.RecordedAt = json.RawMessage(data), json.RawMessage(meta), l.RecordedAt.UTC()
			// Sealed personal data leaves opened: an archive is the
			// tenant's own, and its import seals it again under the keys
			// of its new place; a forgotten subject's fields leave as their
			// tombstones.
			if l.Data, err = s.open(event.Record{Tenant: string(tenant), Stream: l.Stream, Type: l.Type, SchemaVersion: l.SchemaVersion, Data: l.Data}); err != nil {
				rows.Close()
				return err
			}
			if err := ev.write(l); err != nil {
				rows.Close()
				return err
			}
			if l.Ordinal%1000 == 0 {
				s.progress(Progress{Phase: "events", File: EventsFile, Rows: l.Ordinal, Total: events})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the tenant's events: %w", err)
		}
		if m.Files[EventsFile], err = ev.close(); err != nil {
			return err
		}
		s.progress(Progress{Phase: "events", File: EventsFile, Rows: l.Ordinal, Total: events})

		idem, err := newJSONL(dir, IdempotencyFile)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT key, request_hash, response, created_at FROM idempotency_keys WHERE tenant_id = $1 ORDER BY key COLLATE "C"`, s.filter(tenant))
		if err != nil {
			return err
		}
		for rows.Next() {
			var r IdempotencyLine
			if err := rows.Scan(&r.Key, &r.RequestHash, &r.Response, &r.CreatedAt); err != nil {
				rows.Close()
				return err
			}
			r.CreatedAt = r.CreatedAt.UTC()
			if err := idem.write(r); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the tenant's idempotency records: %w", err)
		}
		m.Files[IdempotencyFile], err = idem.close()
		s.progress(Progress{Phase: "idempotency", File: IdempotencyFile, Rows: m.Files[IdempotencyFile].Count})
		return err
	})
	if err != nil {
		return m, err
	}
	m.Export.Head = head.String()

	// The read models must stand where the log does: every projection past
	// the tenant's last event.
	if err := s.waitCaughtUp(ctx, head, s.cfg.CatchUp); err != nil {
		return m, err
	}
	if err := s.stageReadModels(ctx, tenant, dir, ordinals, byEventID, m.Files); err != nil {
		return m, err
	}
	after, n, err := s.head(ctx, tenant)
	if err != nil {
		return m, err
	}
	m.Export.Quiescent = after == head && n == events
	return m, nil
}

// stageReadModels writes readmodels/<table>.jsonl for every table and
// dead_letters.jsonl, in one snapshot, as strata_projector.
func (s *Service) stageReadModels(ctx context.Context, tenant domain.TenantID, dir string, ordinals map[int64]int64, byEventID map[string]int64, files map[string]FileEntry) error {
	tables := append([]Table(nil), s.cfg.Tables...)
	sort.Slice(tables, func(i, j int) bool { return tables[i].Name < tables[j].Name })
	return tenantTx(ctx, s.cfg.Projector, db.RoleProjector, tenant, true, func(tx pgx.Tx) error {
		for _, t := range tables {
			name := ReadModelsDir + t.Name + ".jsonl"
			order, err := primaryKeyOrder(ctx, tx, t.Name)
			if err != nil {
				return err
			}
			n := int64(0)
			entry, err := s.dumpRows(ctx, tx, dir, name, t.Name, []string{"tenant_id"}, t.PositionColumns, order, tenant, func(row map[string]json.RawMessage, pos []*int64) error {
				for i, c := range t.PositionColumns {
					if pos[i] == nil {
						row[c] = json.RawMessage("null")
						continue
					}
					o, ok := ordinals[*pos[i]]
					if !ok {
						return &aheadError{table: t.Name, column: c, pos: *pos[i]}
					}
					row[c] = json.RawMessage(fmt.Sprint(o))
				}
				if n++; n%1000 == 0 {
					s.progress(Progress{Phase: "readmodels", File: name, Rows: n})
				}
				return nil
			})
			if err != nil {
				return err
			}
			files[name] = entry
			s.progress(Progress{Phase: "readmodels", File: name, Rows: entry.Count})
		}
		// Dead letters: what belongs to the source database (the row's
		// identity, the projection's generation, the event's position) is
		// left out; the event's ordinal is added.
		entry, err := s.dumpRows(ctx, tx, dir, DeadLettersFile, "dead_letters", []string{"tenant_id", "id", "generation", "pos_major", "pos_minor"}, nil,
			`projection COLLATE "C", stream_id COLLATE "C", version, parked_at, id`, tenant, func(row map[string]json.RawMessage, _ []*int64) error {
				var id string
				if err := json.Unmarshal(row["event_id"], &id); err != nil {
					return err
				}
				if o, ok := byEventID[id]; ok {
					row["ordinal"] = json.RawMessage(fmt.Sprint(o))
				} else {
					row["ordinal"] = json.RawMessage("null")
				}
				return nil
			})
		if err != nil {
			return err
		}
		files[DeadLettersFile] = entry
		s.progress(Progress{Phase: "dead_letters", File: DeadLettersFile, Rows: entry.Count})
		return nil
	})
}

// dumpRows writes the tenant's rows of table into file name, one JSON
// object per row (the row as to_jsonb gives it, minus the excluded
// columns; fix adjusts it), in the order given.
func (s *Service) dumpRows(ctx context.Context, tx pgx.Tx, dir, name, table string, exclude, posCols []string, order string, tenant domain.TenantID,
	fix func(row map[string]json.RawMessage, pos []*int64) error) (FileEntry, error) {
	out, err := newJSONL(dir, name)
	if err != nil {
		return FileEntry{}, err
	}
	sel := []string{`(to_jsonb(t) - $2::text[])::text`}
	for _, c := range posCols {
		sel = append(sel, `t.`+pgx.Identifier{c}.Sanitize()+`::bigint`)
	}
	q := `SELECT ` + strings.Join(sel, ", ") + ` FROM ` + pgx.Identifier{table}.Sanitize() + ` t WHERE t.tenant_id = $1 ORDER BY ` + order
	rows, err := tx.Query(ctx, q, s.filter(tenant), append(append([]string(nil), exclude...), posCols...))
	if err != nil {
		return FileEntry{}, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw string
		pos := make([]*int64, len(posCols))
		dest := []any{&raw}
		for i := range pos {
			dest = append(dest, &pos[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return FileEntry{}, err
		}
		row := map[string]json.RawMessage{}
		dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
		if err := dec.Decode(&row); err != nil {
			return FileEntry{}, fmt.Errorf("%s: decode a row: %w", table, err)
		}
		if err := fix(row, pos); err != nil {
			return FileEntry{}, err
		}
		if err := out.write(row); err != nil {
			return FileEntry{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return FileEntry{}, fmt.Errorf("read %s: %w", table, err)
	}
	return out.close()
}

// primaryKeyOrder returns the ORDER BY of table's primary key, text
// columns in byte order (COLLATE "C"), so that two databases with other
// default collations order the rows the same. It refuses a table that is
// not a tenant table or has no primary key.
func primaryKeyOrder(ctx context.Context, tx pgx.Tx, table string) (string, error) {
	rows, err := tx.Query(ctx, `SELECT a.attname, a.attcollation <> 0,
       EXISTS (SELECT 1 FROM pg_attribute x WHERE x.attrelid = c.oid AND x.attname = 'tenant_id' AND NOT x.attisdropped)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $2
JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE c.relname = $1
ORDER BY k.ord`, table, db.Schema)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var cols []string
	tenantTable := false
	for rows.Next() {
		var col string
		var collatable bool
		if err := rows.Scan(&col, &collatable, &tenantTable); err != nil {
			return "", err
		}
		if col == "tenant_id" {
			continue
		}
		expr := pgx.Identifier{col}.Sanitize()
		if collatable {
			expr += ` COLLATE "C"`
		}
		cols = append(cols, expr)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if len(cols) == 0 || !tenantTable {
		return "", fmt.Errorf("read-model table %s: not a tenant table with a primary key in schema %s", table, db.Schema)
	}
	return strings.Join(cols, ", "), nil
}

// open returns rec's JSON with its sealed personal fields opened.
func (s *Service) open(rec event.Record) (json.RawMessage, error) {
	if s.cfg.Registry == nil {
		if event.Sealed(rec.Data) {
			return nil, fmt.Errorf("export event %s v%d of %s: %w", rec.Stream, rec.Version, rec.Type, event.ErrSealed)
		}
		return rec.Data, nil
	}
	return s.cfg.Registry.Open(rec)
}

// stageAttempts bounds how often an export starts again because the
// tenant was written between its log's snapshot and its read models' (a
// process manager appending, a client writing): the read models then hold
// positions the exported log does not.
const stageAttempts = 5

// aheadError: a read model row names a position that is not among the
// exported log's events.
type aheadError struct {
	table, column string
	pos           int64
}

func (e *aheadError) Error() string {
	return fmt.Sprintf("%s.%s = %d is no event of the tenant's exported log: the read model is ahead of the log (the tenant kept being written: retry, or suspend it to export) or the column is not a position",
		e.table, e.column, e.pos)
}

// logHas reports whether pos is an event of the tenant's log now.
func (s *Service) logHas(ctx context.Context, tenant domain.TenantID, pos int64) (bool, error) {
	var ok bool
	err := tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE tenant_id = $1 AND position = $2)`, s.filter(tenant), pos).Scan(&ok)
	})
	return ok, err
}
