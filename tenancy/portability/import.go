package portability

import (
	"context"
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
	// Limits bound the import; zero fields take DefaultImportLimits.
	Limits ImportLimits
}

// ImportResult is what an import did.
type ImportResult struct {
	Tenant domain.TenantID `json:"tenant"`
	From   domain.TenantID `json:"from"` // the archive's tenant
	// Events is the tenant's imported events: the archive's count once
	// Complete; Resumed of them were there from an earlier run of the
	// same import.
	Events  int64 `json:"events"`
	Resumed int64 `json:"resumed,omitempty"`
	// EventIDs is "kept" (the archive's own tenant) or "derived" (another
	// tenant: ImportedEventID).
	EventIDs    string `json:"event_ids"`
	Idempotency int64  `json:"idempotency_records"`
	// DeadLetters counts the archive's dead letters: kept in the archive,
	// not restored (docs/tenants.md says why).
	DeadLetters int64 `json:"dead_letters_in_archive"`
	Provisioned bool  `json:"provisioned"`
	// Complete: every event and idempotency record is committed, the
	// history is marked as imported (no process manager or relay acts on
	// it) and the tenant is in the directory, with Status. What follows
	// (the Wait) only verifies.
	Complete bool   `json:"complete"`
	Status   string `json:"status,omitempty"`
	// CaughtUp: every projection applied the imported events (only with
	// a Wait).
	CaughtUp bool `json:"caught_up"`
	// ReadModels compares each read-model table after the catch-up with
	// the archive's: "equal", "differs" or "not compared".
	ReadModels map[string]string `json:"read_models"`
	Limits     ImportLimits      `json:"limits"`
	Manifest   Manifest          `json:"manifest"`
}

// Errors of an import.
var (
	// ErrAlreadyImported: the tenant holds exactly the archive's events,
	// imported before (a retry of an import that completed).
	ErrAlreadyImported = fmt.Errorf("%w: already imported", ErrNotEmpty)
	// ErrReadModelsDiffer: after the catch-up, a read model differs from
	// the archive's.
	ErrReadModelsDiffer = errors.New("the read models differ from the archive's")
)

// Import loads an archive into a tenant that has no data, in two passes
// over a private copy of it (ARCHITECTURE decision 18):
//
//  1. check: every file against the manifest (count, SHA-256), every
//     line against the format (no unknown field, one value, bounded
//     length), every event against its module's codec (strict) and rules
//     (event.Validator), its stream's versions and the limits. Nothing
//     is written unless everything passes.
//  2. load, under the session lock db.ImportLockClass of the tenant:
//     the tenant_arrivals row first (the process managers and the relay
//     pass over the tenant's events from then on: imported history is
//     not decided or published again, projections apply it), then the
//     events in their order, under the target's IDs, and the idempotency
//     records, in bounded transactions each committed (the log's horizon
//     is never held for long); then the arrival's end, then the
//     directory: a tenant it does not have is provisioned last, so it is
//     served only once its history is complete.
//
// A run that stops midway (a crash, the time limit) leaves the tenant
// unserved with a prefix of the archive; running the same import again
// continues after it. Read models are not loaded: the projections derive
// them from the imported events (Wait waits for them and compares). A
// tenant that is erasing or erased is refused, as is one with data
// (ErrNotEmpty; ErrAlreadyImported when the data is this archive), and
// one in the directory that is active (suspend it first: nothing may
// write to it while its history loads).
//
// The result is returned with every error: Complete says whether the
// import itself is done, whatever the Wait found.
func (s *Service) Import(ctx context.Context, r io.Reader, o ImportOptions) (ImportResult, error) {
	lim := o.Limits.withDefaults()
	res := ImportResult{Tenant: o.Tenant, ReadModels: map[string]string{}, Limits: lim}
	if s.cfg.Registry == nil {
		return res, errors.New("portability: an import needs the modules' event registry (Config.Registry)")
	}
	if err := lim.Validate(); err != nil {
		return res, err
	}
	runCtx, cancel := context.WithTimeout(ctx, lim.Duration)
	err := s.importArchive(runCtx, r, lim, &res)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w of %s (--timeout): %v", ErrTimeLimit, lim.Duration, err)
		}
		op := "import"
		if res.Tenant != "" {
			op = "import into " + string(res.Tenant)
		}
		switch {
		case res.Events > 0 && !res.Complete:
			return res, fmt.Errorf("%s: %w; %d of the archive's %d events are committed, and %s is not served until the import completes: run the same import again to continue",
				op, err, res.Events, res.Manifest.Files[EventsFile].Count, res.Tenant)
		case !res.Complete:
			return res, fmt.Errorf("%s (nothing was written): %w", op, err)
		default:
			return res, fmt.Errorf("%s: %w", op, err)
		}
	}
	if o.Wait <= 0 {
		return res, nil
	}
	head, _, err := s.head(ctx, res.Tenant)
	if err == nil {
		err = s.waitCaughtUp(ctx, head, o.Wait)
	}
	if err == nil {
		res.CaughtUp = true
		err = s.compareReadModels(ctx, res.Tenant, res.Manifest, &res)
	}
	if err != nil {
		return res, fmt.Errorf("imported %d events into %s, but: %w", res.Events, res.Tenant, err)
	}
	return res, nil
}

// importArchive is Import up to the tenant's activation.
func (s *Service) importArchive(ctx context.Context, r io.Reader, lim ImportLimits, res *ImportResult) error {
	f, err := spool(ctx, r, lim.ArchiveBytes)
	if err != nil {
		return err
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	p, err := s.check(ctx, f, lim)
	if err != nil {
		return err
	}
	res.From, res.Manifest, res.DeadLetters = p.manifest.Tenant, p.manifest, p.deadLetters
	if res.Tenant == "" {
		res.Tenant = p.manifest.Tenant
	}
	for _, t := range p.manifest.Tables() {
		res.ReadModels[t] = "not compared"
	}
	tenant := res.Tenant
	m := ids{tenant: tenant, derive: tenant != p.manifest.Tenant, p: p}
	res.EventIDs = "kept"
	if m.derive {
		res.EventIDs = "derived"
	}

	release, err := s.lockImport(ctx, tenant)
	if err != nil {
		return err
	}
	defer release()
	st, err := s.state(ctx, tenant, p, m)
	if err != nil {
		return err
	}
	if err := s.admit(ctx, tenant, p, st); err != nil {
		return err
	}
	if err := s.audit(ctx, "import", tenant, map[string]any{"from": p.manifest.Tenant, "files": len(p.manifest.Files), "events": p.events(),
		"archive": p.digest[:16], "resumed": st.events}); err != nil {
		return err
	}
	if !st.ours {
		// Before the first event is visible: from here on the process
		// managers and the relay pass over every event of the tenant.
		err := s.ownerTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO tenant_arrivals (tenant, source) VALUES ($1, $2)
ON CONFLICT (tenant) DO UPDATE SET source = EXCLUDED.source, through_tx = NULL, through_pos = NULL, arrived_at = now()`, tenant, importSource(p))
			return err
		})
		if err != nil {
			return fmt.Errorf("record the import in tenant_arrivals: %w", err)
		}
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	res.Resumed, res.Events = st.events, st.events
	l := &loader{s: s, ctx: ctx, tenant: tenant, ids: m, skip: st.events, total: p.events(), known: st.known}
	_, err = s.walk(ctx, f, lim, l)
	res.Events, res.Idempotency = st.events+l.loaded, l.records
	if err != nil {
		if st.events == 0 && l.loaded == 0 && l.records == 0 {
			s.forgetImport(tenant, p)
		}
		return err
	}
	if err := s.importEnd(ctx, tenant); err != nil {
		return err
	}
	// Wake the projectors, as an append does.
	if _, err := s.cfg.App.Exec(ctx, `SELECT pg_notify($1, '')`, projections.NotifyChannel); err != nil {
		return err
	}
	res.Status = st.status
	if !st.known {
		if err := s.cfg.Provision(ctx, tenant); err != nil {
			return fmt.Errorf("every event is loaded, but provisioning %s failed (run the same import again, or `strata tenants provision %s`): %w", tenant, tenant, err)
		}
		res.Provisioned, res.Status = true, "active"
	}
	res.Complete = true
	return nil
}

// forgetImport removes the arrival row of an import that failed before
// writing anything: left there, it would make the process managers and
// the relay pass over every event of a tenant provisioned later under the
// same ID by other means. Best effort (the import has failed already; a
// rerun finds the row and continues).
func (s *Service) forgetImport(tenant domain.TenantID, p *plan) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM tenant_arrivals WHERE tenant = $1 AND source = $2 AND through_tx IS NULL`, tenant, importSource(p))
		return err
	})
}

// importEnd sets the tenant's arrival's end at its last event: events
// after it are the tenant's own, which the process managers decide and
// the relay publishes.
func (s *Service) importEnd(ctx context.Context, tenant domain.TenantID) error {
	head, _, err := s.head(ctx, tenant)
	if err != nil {
		return err
	}
	if head.tx == "" {
		head.tx = "0" // no events: nothing of the tenant is imported history
	}
	err = s.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tenant_arrivals SET through_tx = $2::text::xid8, through_pos = $3 WHERE tenant = $1`, tenant, head.tx, head.pos)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the end of the imported history in tenant_arrivals: %w", err)
	}
	return nil
}

// spool copies the archive into a private temporary file (the two passes
// read it twice, and read the same bytes), refusing more than max bytes.
func spool(ctx context.Context, r io.Reader, max int64) (*os.File, error) {
	f, err := os.CreateTemp("", "strata-import-*")
	if err != nil {
		return nil, fmt.Errorf("spool the archive: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(ctxReader{ctx, r}, max+1))
	if err == nil && n > max {
		err = fmt.Errorf("%w: the archive is larger than the limit of %d bytes (--max-archive)", ErrOverLimit, max)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
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
		return fmt.Errorf("%w in %s", ErrReadModelsDiffer, strings.Join(differ, ", "))
	}
	return nil
}

// Recompare is an import's Wait for an archive imported before (Import
// answered ErrAlreadyImported): it checks the archive, waits up to wait
// for the projections to apply the tenant's events and compares the read
// models with the archive's.
func (s *Service) Recompare(ctx context.Context, r io.Reader, tenant domain.TenantID, wait time.Duration) (ImportResult, error) {
	res := ImportResult{Tenant: tenant, ReadModels: map[string]string{}, Complete: true, EventIDs: "kept"}
	m, err := s.Check(ctx, r, ImportLimits{})
	if err != nil {
		return res, err
	}
	res.From, res.Manifest, res.Events = m.Tenant, m, m.Files[EventsFile].Count
	for _, t := range m.Tables() {
		res.ReadModels[t] = "not compared"
	}
	head, _, err := s.head(ctx, tenant)
	if err == nil {
		err = s.waitCaughtUp(ctx, head, wait)
	}
	if err == nil {
		res.CaughtUp = true
		err = s.compareReadModels(ctx, tenant, m, &res)
	}
	return res, err
}
