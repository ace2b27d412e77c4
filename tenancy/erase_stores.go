package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
)

// StoreKind is what kind of store holds a tenant's data.
type StoreKind string

// Store kinds.
const (
	KindTable StoreKind = "table" // a tenant-scoped table (tenant_id, row-level security), declared with its migration line, or a rebuild's shadow of one
	// KindReferencing: a table that names the tenant without a tenant_id
	// column (an export's job and archive, the relay's watermill-sql copy
	// of the log, a move's bookkeeping), erased by the SQL its migration
	// line declares (db.TableErase).
	KindReferencing StoreKind = "referencing"
	// KindWatermill is what receipts written before the declarations call
	// the relay's watermill-sql copy of the log, now a KindReferencing
	// table; a workflow begun then and resumed now erases it as one.
	KindWatermill StoreKind = "watermill"
	KindAudit     StoreKind = "audit"   // tenant_audit, the platform calls about the tenant
	KindBroker    StoreKind = "broker"  // the relay's NATS JetStream subjects <topic>.<tenant>.>
	KindESDB      StoreKind = "esdb"    // an EventStoreDB log: the tenant's streams
	KindArchive   StoreKind = "archive" // the archive store: objects under tenants/<tenant>/ (package tenancy/archive)
)

// Mode is how a store's data of the tenant is erased, as the receipt
// states it.
type Mode string

// Erasure modes (ARCHITECTURE decision 13).
const (
	// ModeHardDelete: the rows are deleted and a count query afterwards
	// returned 0.
	ModeHardDelete Mode = "hard_delete_verified"
	// ModeAnonymized: the rows are kept (the platform's record of who did
	// what) with the tenant, the caller's token tenant and the call's
	// arguments replaced by a pseudonym of the receipt; a count of rows
	// naming the tenant afterwards returned 0.
	ModeAnonymized Mode = "anonymized"
	// ModeBeyondUse: the store refuses the data from now on (EventStoreDB's
	// deleted streams) but keeps the bytes until its own purge (a
	// scavenge) runs.
	ModeBeyondUse Mode = "beyond_use_until_scavenged"
)

// ModeFor is the mode each kind of store is erased in.
func ModeFor(k StoreKind) Mode {
	switch k {
	case KindAudit:
		return ModeAnonymized
	case KindESDB:
		return ModeBeyondUse
	default:
		return ModeHardDelete
	}
}

// eraserTx runs fn as strata_eraser under the tenant: its policies let it
// see and delete the tenant's rows and nobody else's.
func (e *Eraser) eraserTx(ctx context.Context, tenant domain.TenantID, fn func(pgx.Tx) error) error {
	return eraserTx(ctx, e.cfg.Pool, tenant, fn)
}

// eraserTx runs fn in a transaction of pool as RoleEraser under the
// tenant's setting.
func eraserTx(ctx context.Context, pool *pgxpool.Pool, tenant domain.TenantID, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
			return fmt.Errorf("become %s (the owner connection must be a member; run `strata migrate up`): %w", db.RoleEraser, err)
		}
		if err := db.SetTenant(ctx, tx, string(tenant)); err != nil {
			return err
		}
		return fn(tx)
	})
}

func tableStore(table string, tenant domain.TenantID) StoreState {
	return StoreState{Name: "table:" + table, Kind: KindTable, Mode: ModeFor(KindTable), State: StatePending,
		Verification: fmt.Sprintf("SELECT count(*) FROM %s.%s WHERE tenant_id = '%s' -- as %s with app.tenant_id = '%s'",
			db.Schema, pgx.Identifier{table}.Sanitize(), tenant, db.RoleEraser, tenant)}
}

// referencingStore is a declared tenant-referencing table erased by its
// declared SQL; its verification is the declared count with the tenant in
// place of $1 (a tenant ID is [a-z0-9-]: nothing to escape).
func referencingStore(t db.Table, tenant domain.TenantID) StoreState {
	return StoreState{Name: "table:" + t.Name, Kind: KindReferencing, Mode: ModeFor(KindReferencing), State: StatePending,
		Verification: strings.ReplaceAll(t.Erase.Count, "$1", "'"+string(tenant)+"'") + " -- as " + db.RoleOwner}
}

func auditStore(tenant domain.TenantID) StoreState {
	return StoreState{Name: "table:tenant_audit", Kind: KindAudit, Mode: ModeFor(KindAudit), State: StatePending,
		Verification: fmt.Sprintf(`SELECT count(*) FROM %s.tenant_audit WHERE tenant = '%s' OR subject LIKE '%%@%s'`, db.Schema, tenant, tenant)}
}

// schema grants the eraser its policy on every table with a tenant_id
// column (the catalog, as a safety net: a shadow table created since the
// last migration is covered too), then compares the schema with the
// declared classification: a table in no classification, or one the
// schema contradicts, stops the workflow with ErrUnclassified, before it
// destroys anything. It returns the tenant-scoped tables, the log first,
// then process-manager state (so that no deadline fires for the tenant
// while the rest goes), then the rest by name, and the report.
func (e *Eraser) schema(ctx context.Context) ([]string, db.CatalogReport, error) {
	if _, err := db.EnsureEraserGrants(ctx, e.cfg.Pool); err != nil {
		return nil, db.CatalogReport{}, err
	}
	rep, err := e.tables.Inspect(ctx, e.cfg.Pool, db.Schema)
	if err != nil {
		return nil, rep, err
	}
	if err := rep.Err(); err != nil {
		return nil, rep, fmt.Errorf("%w; nothing was destroyed by this step", err)
	}
	tables := slices.Clone(rep.TenantScoped)
	rank := func(t string) int {
		switch {
		case t == "events":
			return 0
		case strings.HasPrefix(t, "process_"):
			return 1
		}
		return 2
	}
	sort.SliceStable(tables, func(i, j int) bool {
		if ri, rj := rank(tables[i]), rank(tables[j]); ri != rj {
			return ri < rj
		}
		return tables[i] < tables[j]
	})
	return tables, rep, nil
}

// tableStores lists the stores of the schema's tables in the order they
// are erased: the tenant-scoped tables, then the tenant-referencing tables
// to delete from, in the order they are declared (the audit, anonymized,
// comes last of all: see inventory).
func (e *Eraser) tableStores(ctx context.Context, tenant domain.TenantID) ([]StoreState, error) {
	tables, rep, err := e.schema(ctx)
	if err != nil {
		return nil, err
	}
	var stores []StoreState
	for _, t := range tables {
		stores = append(stores, tableStore(t, tenant))
	}
	for _, t := range e.tables.Tables() {
		if t.Class != db.ClassTenantReferencing || t.Erase.Mode != db.EraseDelete || !slices.Contains(rep.Present, t.Name) {
			continue
		}
		stores = append(stores, referencingStore(t, tenant))
	}
	return stores, nil
}

// declared returns the deletion a KindReferencing (or KindWatermill)
// store's table declares.
func (e *Eraser) declared(s StoreState) (db.TableErase, error) {
	name := strings.TrimPrefix(s.Name, "table:")
	t, ok := e.tables.Lookup(name)
	if !ok || t.Class != db.ClassTenantReferencing || t.Erase.Mode != db.EraseDelete {
		return db.TableErase{}, fmt.Errorf("store %s is in the inventory but its table is declared with no deletion in this process's migration lines", s.Name)
	}
	return t.Erase, nil
}

// kept lists the tenant-referencing tables the erasure keeps, with the
// reason each declares: in the receipt.
func (e *Eraser) kept() []KeptTable {
	var out []KeptTable
	for _, t := range e.tables.Tables() {
		if t.Class == db.ClassTenantReferencing && t.Erase.Mode == db.EraseKeep {
			out = append(out, KeptTable{Name: "table:" + t.Name, Reason: t.Reason})
		}
	}
	return out
}

// KeptTable is a table that names the erased tenant and is kept, by its
// declaration (db.EraseKeep): the erasure's own record, the directory's
// tombstone.
type KeptTable struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// count returns the store's count of the tenant's items now.
func (e *Eraser) count(ctx context.Context, w *Erasure, s StoreState, before bool) (int64, error) {
	var n int64
	switch s.Kind {
	case KindTable:
		table := strings.TrimPrefix(s.Name, "table:")
		err := e.eraserTx(ctx, w.Tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{db.Schema, table}.Sanitize()).Scan(&n)
		})
		if err != nil && db.SQLState(err) == "42P01" { // dropped since (a rebuild's shadow table swapped away)
			return 0, nil
		}
		return n, err
	case KindReferencing, KindWatermill:
		d, err := e.declared(s)
		if err != nil {
			return 0, err
		}
		err = e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, d.Count, w.Tenant).Scan(&n)
		})
		return n, err
	case KindAudit:
		// Before: the rows up to the workflow's floor (auditFloor);
		// after: every row naming the tenant up to the last one this run
		// anonymized, the erasure's own included. A platform call about
		// the tenant audited after the anonymization (the erasure's status
		// polled over HTTP) is no row left behind: before this bound, one
		// such poll between the anonymization and its count made the store
		// unknown and stopped the erasure.
		floor := int64(1<<63 - 1)
		switch {
		case before:
			floor = w.AuditFloor
		case w.auditThrough > 0:
			floor = w.auditThrough
		}
		err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM tenant_audit WHERE (tenant = $1 OR subject LIKE '%@' || $1) AND id <= $2`, w.Tenant, floor).Scan(&n)
		})
		return n, err
	}
	x := e.external(s.Name)
	if x == nil {
		return 0, fmt.Errorf("store %s is in the inventory but not configured in this process", s.Name)
	}
	return x.Count(ctx, w.Tenant)
}

func (e *Eraser) external(name string) ExternalStore {
	for _, x := range e.cfg.External {
		if x.Name() == name {
			return x
		}
	}
	return nil
}

// inventory lists every store of the tenant with its count before: the
// tables of the schema as their migration lines declare them, the
// external stores, and the audit trail last (the erasure's own calls are
// audited until the end).
func (e *Eraser) inventory(ctx context.Context, w *Erasure) error {
	stores, err := e.tableStores(ctx, w.Tenant)
	if err != nil {
		return err
	}
	for _, x := range e.cfg.External {
		stores = append(stores, StoreState{Name: x.Name(), Kind: x.Kind(), Mode: ModeFor(x.Kind()), State: StatePending,
			Verification: x.Verification(w.Tenant)})
	}
	stores = append(stores, auditStore(w.Tenant))
	for i := range stores {
		n, err := e.count(ctx, w, stores[i], true)
		if err != nil {
			return fmt.Errorf("count %s: %w", stores[i].Name, err)
		}
		stores[i].Before = n
	}
	w.Stores = stores
	return nil
}

// isTable reports whether a store is a table of the schema (found by
// tableStores), as opposed to an external store or the audit trail.
func isTable(k StoreKind) bool { return k == KindTable || k == KindReferencing || k == KindWatermill }

// addNewTables puts tables created since the inventory (a rebuild's shadow
// tables, a module migrated meanwhile) into it, counted now; a table in no
// classification stops the workflow (schema).
func (e *Eraser) addNewTables(ctx context.Context, w *Erasure) error {
	stores, err := e.tableStores(ctx, w.Tenant)
	if err != nil {
		return err
	}
	for _, s := range stores {
		if slices.ContainsFunc(w.Stores, func(x StoreState) bool { return x.Name == s.Name }) {
			continue
		}
		if s.Before, err = e.count(ctx, w, s, true); err != nil {
			return fmt.Errorf("count %s: %w", s.Name, err)
		}
		s.Note = "created after the inventory"
		// Before the external and audit stores, which follow the tables.
		at := slices.IndexFunc(w.Stores, func(x StoreState) bool { return !isTable(x.Kind) })
		if at < 0 {
			at = len(w.Stores)
		}
		w.Stores = slices.Insert(w.Stores, at, s)
	}
	return nil
}

// eraseStore erases one store in its mode and verifies it.
func (e *Eraser) eraseStore(ctx context.Context, w *Erasure, i int) error {
	s := &w.Stores[i]
	var done int64
	report := func(n int64) {
		done += n
		e.progress(Progress{Tenant: w.Tenant, Step: StepErase, Store: s.Name, Done: done, Total: s.Before})
	}
	switch s.Kind {
	case KindTable:
		table := pgx.Identifier{db.Schema, strings.TrimPrefix(s.Name, "table:")}.Sanitize()
		if s.Name == "table:events" {
			// Deleting the newest events must not carry the end of the log
			// back below the runners' checkpoints (migration 014).
			if err := e.eraserTx(ctx, w.Tenant, func(tx pgx.Tx) error { return db.RaiseLogWatermark(ctx, tx) }); err != nil {
				return fmt.Errorf("raise the log's watermark: %w", err)
			}
		}
		counters := parkedCounters[strings.TrimPrefix(s.Name, "table:")]
		for {
			var n int64
			err := e.eraserTx(ctx, w.Tenant, func(tx pgx.Tx) error {
				if counters != "" {
					var err error
					n, err = deleteParked(ctx, tx, table, counters, e.cfg.BatchSize)
					return err
				}
				tag, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE ctid = ANY (ARRAY(SELECT ctid FROM `+table+` LIMIT $1))`, e.cfg.BatchSize)
				n = tag.RowsAffected()
				return err
			})
			if err != nil && db.SQLState(err) == "42P01" {
				break
			}
			if err != nil {
				return fmt.Errorf("delete from %s: %w", s.Name, err)
			}
			if n == 0 {
				break
			}
			report(n)
		}
	case KindReferencing, KindWatermill:
		d, err := e.declared(*s)
		if err != nil {
			return err
		}
		for {
			var n int64
			err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, d.Delete, w.Tenant, e.cfg.BatchSize)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return fmt.Errorf("delete from %s: %w", s.Name, err)
			}
			if n == 0 {
				break
			}
			report(n)
		}
	case KindAudit:
		through, err := e.anonymizeAudit(ctx, w.Tenant, w.ReceiptID)
		if err != nil {
			return err
		}
		w.auditThrough = through
	default:
		x := e.external(s.Name)
		if x == nil {
			return fmt.Errorf("store %s is in the inventory but not configured in this process", s.Name)
		}
		if err := x.Erase(ctx, w.Tenant); err != nil {
			return fmt.Errorf("erase %s: %w", s.Name, err)
		}
	}
	return e.check(ctx, w, i)
}

// check counts the store after its erasure: done when nothing of the
// tenant is left, unknown otherwise.
func (e *Eraser) check(ctx context.Context, w *Erasure, i int) error {
	s := &w.Stores[i]
	n, err := e.count(ctx, w, *s, false)
	if err != nil {
		s.State = StateUnknown
		s.Note = "verification failed: " + err.Error()
		return nil
	}
	at := nowUTC()
	s.After, s.VerifiedAt = &n, &at
	if n == 0 {
		s.State = StateDone
		if strings.HasPrefix(s.Note, "verification failed") || strings.HasPrefix(s.Note, "rows left") {
			s.Note = ""
		}
	} else {
		s.State = StateUnknown
		s.Note = fmt.Sprintf("rows left after erasure: %d", n)
	}
	return nil
}

// Pseudonym is what tenant_audit's tenant column says of an erased
// tenant: a hash of the receipt and the tenant, the same on every rerun,
// which tells the rows of one erased tenant apart from another's without
// naming it.
func Pseudonym(receiptID string, tenant domain.TenantID) string {
	sum := sha256.Sum256([]byte(receiptID + ":" + string(tenant)))
	return "erased-" + hex.EncodeToString(sum[:12])
}

// anonymizeAudit replaces the tenant in tenant_audit: the tenant column
// by its pseudonym, a caller whose token was the tenant's by
// "erased:<receipt>", and the call's arguments (names, reasons, quotas) by
// {"erased": receipt}.
func (e *Eraser) anonymizeAudit(ctx context.Context, tenant domain.TenantID, receiptID string) (through int64, err error) {
	err = e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM tenant_audit`).Scan(&through); err != nil {
			return fmt.Errorf("anonymize tenant_audit: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE tenant_audit SET
			tenant = CASE WHEN tenant = $1 THEN $2 ELSE tenant END,
			subject = CASE WHEN subject LIKE '%@' || $1 THEN 'erased:' || $3 ELSE subject END,
			detail = jsonb_build_object('erased', $3::text)
			WHERE (tenant = $1 OR subject LIKE '%@' || $1) AND id <= $4`, tenant, Pseudonym(receiptID, tenant), receiptID, through)
		if err != nil {
			return fmt.Errorf("anonymize tenant_audit: %w", err)
		}
		return nil
	})
	return through, err
}

// parkedCounters: the tables whose rows projection_checkpoints counts per
// reader (its parked_streams and parked_letters columns, which tell the
// runner whether to look for parked streams at all and `replay status`
// what is parked), and the counter each row of them adds to while it is
// parked. An erasure that deleted a tenant's parked rows without lowering
// the counters left every reader that had parked the tenant (a projection,
// a process manager, the relay) counting streams nobody could list, and
// looking them up in every batch, for good.
var parkedCounters = map[string]string{
	"parked_streams": "parked_streams",
	"dead_letters":   "parked_letters",
}

// deleteParked deletes a batch of the tenant's rows of table (one of
// parkedCounters) in tx, which runs as the eraser under the tenant's
// setting, and lowers the counter of each reader generation they were
// counted in, as the owner, in the same transaction.
func deleteParked(ctx context.Context, tx pgx.Tx, table, counter string, limit int) (int64, error) {
	parked := "true"
	if counter == "parked_letters" {
		parked = "d.status = 'parked'"
	}
	rows, err := tx.Query(ctx, `DELETE FROM `+table+` d WHERE ctid = ANY (ARRAY(SELECT ctid FROM `+table+` LIMIT $1))
RETURNING d.projection, d.generation::text, `+parked, limit)
	if err != nil {
		return 0, err
	}
	type key struct{ projection, generation string }
	counts := map[key]int64{}
	var n int64
	for rows.Next() {
		var k key
		var counted bool
		if err := rows.Scan(&k.projection, &k.generation, &counted); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		if counted {
			counts[k]++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(counts) == 0 {
		return n, nil
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleOwner); err != nil {
		return 0, fmt.Errorf("become %s to lower the readers' parked counts: %w", db.RoleOwner, err)
	}
	for k, c := range counts {
		if _, err := tx.Exec(ctx, `UPDATE projection_checkpoints SET `+counter+` = greatest(`+counter+` - $3, 0), updated_at = now()
WHERE projection = $1 AND generation = $2::uuid`, k.projection, k.generation, c); err != nil {
			return 0, fmt.Errorf("lower %s of %s: %w", counter, k.projection, err)
		}
	}
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
		return 0, err
	}
	return n, nil
}
