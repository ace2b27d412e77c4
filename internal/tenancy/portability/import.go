package portability

import (
	"bufio"
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

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/db"
	"github.com/strata-es/strata/internal/placement"
	"github.com/strata-es/strata/projections"
)

// ImportOptions says how to import.
type ImportOptions struct {
	// Tenant is the tenant to load the archive into; "" is the archive's.
	Tenant domain.TenantID
	// Wait, when positive, waits that long for the projections to apply
	// the imported events and then compares the read models with the
	// archive's, table by table.
	Wait time.Duration
}

// ImportResult is what an import did.
type ImportResult struct {
	Tenant      domain.TenantID `json:"tenant"`
	From        domain.TenantID `json:"from"` // the archive's tenant
	Events      int64           `json:"events"`
	Idempotency int64           `json:"idempotency_records"`
	// DeadLetters counts the archive's dead letters: kept in the archive,
	// not restored (docs/tenants.md says why).
	DeadLetters int64 `json:"dead_letters_in_archive"`
	Provisioned bool  `json:"provisioned"`
	// CaughtUp: every projection applied the imported events (only with
	// a Wait).
	CaughtUp bool `json:"caught_up"`
	// ReadModels compares each read-model table after the catch-up with
	// the archive's: "equal", "differs" or "not compared".
	ReadModels map[string]string `json:"read_models"`
	Manifest   Manifest          `json:"manifest"`
}

// eventBatch is how many events one INSERT carries.
const eventBatch = 1000

// Import loads an archive into an empty tenant: its events, in their
// order, with their IDs, versions, metadata and recorded times, and its
// idempotency records, in one transaction as strata_app under the
// tenant's row-level security; every file is checked against the
// manifest's count and SHA-256 before the transaction commits. Read models
// are not loaded: the projections derive them from the imported events
// (the running projectors catch up; Wait waits for them and compares).
// A tenant the directory does not have is provisioned after the load (so
// it is served only once its log is complete); one that is erasing or
// erased is refused, as is a tenant with data (ErrNotEmpty).
func (s *Service) Import(ctx context.Context, r io.Reader, o ImportOptions) (ImportResult, error) {
	a, err := openArchive(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return ImportResult{}, err
	}
	res := ImportResult{Tenant: o.Tenant, From: a.manifest.Tenant, Manifest: a.manifest, ReadModels: map[string]string{}}
	if res.Tenant == "" {
		res.Tenant = a.manifest.Tenant
	}
	tenant := res.Tenant
	status, placedIn, known, err := s.directoryEntry(ctx, tenant)
	if err != nil {
		return res, err
	}
	if known && placedIn != placement.Pool {
		return res, fmt.Errorf("%w: tenant %s is placed in %s; importing into a tenant outside the shared database is not supported yet", domain.ErrRejected, tenant, placedIn)
	}
	if known && (status == "erasing" || status == "erased") {
		return res, fmt.Errorf("%w: tenant %s is %s: it cannot be imported into", domain.ErrRejected, tenant, status)
	}
	if !known && s.cfg.Provision == nil {
		return res, fmt.Errorf("%w: no tenant %q in the directory (provision it first)", domain.ErrNotFound, tenant)
	}
	if err := s.audit(ctx, "import", tenant, map[string]any{"from": a.manifest.Tenant, "files": len(a.manifest.Files)}); err != nil {
		return res, err
	}
	if err := s.checkEmpty(ctx, tenant); err != nil {
		return res, err
	}

	err = tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, false, func(tx pgx.Tx) error {
		for {
			name, body, check, err := a.next()
			if errors.Is(err, io.EOF) {
				return a.missing()
			}
			if err != nil {
				return err
			}
			switch name {
			case EventsFile:
				if res.Events, err = s.loadEvents(ctx, tx, tenant, body); err != nil {
					return err
				}
			case IdempotencyFile:
				if res.Idempotency, err = loadIdempotency(ctx, tx, tenant, body); err != nil {
					return err
				}
			case DeadLettersFile:
				res.DeadLetters = a.manifest.Files[name].Count
			}
			// Read models and dead letters are only verified here.
			if err := check(); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return res, fmt.Errorf("import into %s (nothing was imported): %w", tenant, err)
	}
	// Wake the projectors, as an append does.
	if _, err := s.cfg.App.Exec(ctx, `SELECT pg_notify($1, '')`, projections.NotifyChannel); err != nil {
		return res, err
	}
	if !known {
		if err := s.cfg.Provision(ctx, tenant); err != nil {
			return res, fmt.Errorf("the archive is imported, but provisioning %s failed (run `strata tenants provision %s`): %w", tenant, tenant, err)
		}
		res.Provisioned = true
	}
	for _, t := range a.manifest.Tables() {
		res.ReadModels[t] = "not compared"
	}
	if o.Wait <= 0 {
		return res, nil
	}
	head, _, err := s.head(ctx, tenant)
	if err != nil {
		return res, err
	}
	if err := s.waitCaughtUp(ctx, head, o.Wait); err != nil {
		return res, err
	}
	res.CaughtUp = true
	return res, s.compareReadModels(ctx, tenant, a.manifest, &res)
}

// checkEmpty refuses a tenant that has events, idempotency records,
// read-model rows or dead letters.
func (s *Service) checkEmpty(ctx context.Context, tenant domain.TenantID) error {
	var found []string
	err := tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		for _, t := range []string{"events", "idempotency_keys"} {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				found = append(found, fmt.Sprintf("%d rows in %s", n, t))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tenantTx(ctx, s.cfg.Projector, db.RoleProjector, tenant, true, func(tx pgx.Tx) error {
		tables := []string{"dead_letters"}
		for _, t := range s.cfg.Tables {
			tables = append(tables, t.Name)
		}
		for _, t := range tables {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				found = append(found, fmt.Sprintf("%d rows in %s", n, t))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: %s has %s; an archive is imported only into an empty tenant", ErrNotEmpty, tenant, strings.Join(found, ", "))
	}
	return nil
}

func (s *Service) loadEvents(ctx context.Context, tx pgx.Tx, tenant domain.TenantID, body io.Reader) (int64, error) {
	dec := json.NewDecoder(body)
	var n int64
	var streams, ids, types, data, meta []string
	var versions []int64
	var schemas []int32
	var at []time.Time
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at)
SELECT $1, u.stream_id, u.version, u.event_id::uuid, u.event_type, u.schema_version, u.data::jsonb, u.metadata::jsonb, u.recorded_at
FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[], $9::timestamptz[])
     WITH ORDINALITY AS u(stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at, ord)
ORDER BY u.ord`, tenant, streams, versions, ids, types, schemas, data, meta, at)
		if err != nil {
			return fmt.Errorf("append events %d to %d: %w", n-int64(len(ids))+1, n, err)
		}
		s.progress(Progress{Phase: "events", File: EventsFile, Rows: n})
		streams, ids, types, data, meta, versions, schemas, at = streams[:0], ids[:0], types[:0], data[:0], meta[:0], versions[:0], schemas[:0], at[:0]
		return nil
	}
	for {
		var l EventLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return n, fmt.Errorf("%w: %s line %d: %v", ErrBadArchive, EventsFile, n+1, err)
		}
		n++
		if l.Ordinal != n {
			return n, fmt.Errorf("%w: %s line %d has ordinal %d: events must be in log order", ErrBadArchive, EventsFile, n, l.Ordinal)
		}
		streams, versions, ids, types = append(streams, l.Stream), append(versions, l.Version), append(ids, l.EventID), append(types, l.Type)
		schemas, data, meta, at = append(schemas, int32(l.SchemaVersion)), append(data, string(l.Data)), append(meta, string(l.Metadata)), append(at, l.RecordedAt)
		if len(ids) == eventBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}

func loadIdempotency(ctx context.Context, tx pgx.Tx, tenant domain.TenantID, body io.Reader) (int64, error) {
	dec := json.NewDecoder(body)
	var n int64
	for {
		var l IdempotencyLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, fmt.Errorf("%w: %s line %d: %v", ErrBadArchive, IdempotencyFile, n+1, err)
		}
		n++
		if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response, created_at) VALUES ($1, $2, $3, $4, $5)`,
			tenant, l.Key, l.RequestHash, l.Response, l.CreatedAt); err != nil {
			return n, fmt.Errorf("idempotency record %d: %w", n, err)
		}
	}
}

// compareReadModels stages the tenant's read models as an export would and
// compares each table's file with the archive's.
func (s *Service) compareReadModels(ctx context.Context, tenant domain.TenantID, m Manifest, res *ImportResult) error {
	dir, err := os.MkdirTemp("", "strata-import-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Positions of the target's log map to the same ordinals: the import
	// appended the events in the archive's order.
	ordinals, byEventID := map[int64]int64{}, map[string]int64{}
	err = tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		var n int64
		rows, err := tx.Query(ctx, `SELECT position, event_id::text FROM events WHERE tenant_id = $1 ORDER BY tx_id, position`, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var pos int64
			var id string
			if err := rows.Scan(&pos, &id); err != nil {
				return err
			}
			n++
			ordinals[pos], byEventID[id] = n, n
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	files := map[string]FileEntry{}
	s.progress(Progress{Phase: "verify"})
	if err := s.stageReadModels(ctx, tenant, dir, ordinals, byEventID, files); err != nil {
		return err
	}
	var differ []string
	for _, t := range m.Tables() {
		name := ReadModelsDir + t + ".jsonl"
		got, ok := files[name]
		switch {
		case !ok:
			res.ReadModels[t] = "not compared" // a table this installation does not have
		case got == m.Files[name]:
			res.ReadModels[t] = "equal"
		default:
			res.ReadModels[t] = "differs"
			differ = append(differ, t)
		}
	}
	if len(differ) > 0 {
		sort.Strings(differ)
		return fmt.Errorf("the imported tenant's read models differ from the archive's in %s", strings.Join(differ, ", "))
	}
	return nil
}
