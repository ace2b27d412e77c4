package projections

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// The completeness ledger (issue 19): per checkpoint generation and tenant,
// how many of the tenant's events the checkpoint has passed (applied,
// parked, skipped by type) and a rolling hash over their IDs in log order,
// written in the transaction that moves the checkpoint. replay.Verify
// recomputes both from the store and names the first event that differs.

// LedgerMarkEvery is how often (in counted events) a ledger keeps a mark
// of its figures, bounding the window verify searches for a difference.
const LedgerMarkEvery = 256

// LedgerHash is the rolling hash: 32 bytes.
type LedgerHash [sha256.Size]byte

// Fold returns h extended by the event ID id:
// sha256(h || id as 16 bytes), or sha256(h || id's text) for an ID that is
// not a UUID.
func (h LedgerHash) Fold(id string) LedgerHash {
	buf := make([]byte, 0, sha256.Size+36)
	buf = append(buf, h[:]...)
	if u, err := uuid.Parse(id); err == nil {
		buf = append(buf, u[:]...)
	} else {
		buf = append(buf, id...)
	}
	return sha256.Sum256(buf)
}

// Ledger is one tenant's figures.
type Ledger struct {
	Events, Applied, Parked, Skipped int64
	Hash                             LedgerHash
	Last                             event.Position // the last event counted
}

// count adds one event to the ledger.
func (l *Ledger) count(rec event.Record, applied, parked bool) {
	l.Events++
	switch {
	case parked:
		l.Parked++
	case applied:
		l.Applied++
	default:
		l.Skipped++
	}
	l.Hash = l.Hash.Fold(rec.ID)
	l.Last = rec.Position
}

// CountStored adds rec as verify counts the store: every event of the
// tenant up to the checkpoint, whatever became of it.
func (l *Ledger) CountStored(rec event.Record) {
	l.Events++
	l.Hash = l.Hash.Fold(rec.ID)
	l.Last = rec.Position
}

// LedgerBook is what a worker that moves a checkpoint (a Runner, the
// relay, a process manager) keeps of its generation's ledger: the rows it
// has loaded or written, by tenant. Rows are loaded lazily, a tenant at a
// time (row-level security: a tenant's row is read under its setting). A
// book belongs to one lease holder; Reset it when the lease is taken anew.
type LedgerBook struct {
	name, generation string
	rows             map[string]Ledger
}

// NewLedgerBook returns an empty book for the checkpoint name of
// generation (projection_checkpoints.generation).
func NewLedgerBook(name, generation string) *LedgerBook {
	return &LedgerBook{name: name, generation: generation, rows: map[string]Ledger{}}
}

// Reset forgets every row (after the lease was taken again) and sets the
// generation.
func (lb *LedgerBook) Reset(generation string) {
	lb.generation = generation
	clear(lb.rows)
}

const loadLedgerSQL = `SELECT events, applied, parked, skipped, hash, pos_major::text, pos_minor::text
FROM projection_ledger WHERE generation = $1::uuid AND tenant_id = $2`

// Load reads the rows of recs' tenants the book does not hold yet, in one
// round trip of its own read-only transaction on conn.
func (lb *LedgerBook) Load(ctx context.Context, conn *pgx.Conn, recs []event.Record) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY") // set_config is transaction-local
	for _, rec := range recs {
		if _, ok := lb.rows[rec.Tenant]; ok {
			continue
		}
		tenant := rec.Tenant
		lb.rows[tenant] = Ledger{} // none yet, unless the row says otherwise
		b.Queue(db.SetTenantSQL, tenant)
		b.Queue(loadLedgerSQL, lb.generation, tenant).Query(func(rows pgx.Rows) error {
			var l Ledger
			for rows.Next() {
				var hash []byte
				var major, minor string
				if err := rows.Scan(&l.Events, &l.Applied, &l.Parked, &l.Skipped, &hash, &major, &minor); err != nil {
					return err
				}
				if len(hash) != len(l.Hash) {
					return fmt.Errorf("ledger of tenant %s: hash of %d bytes", tenant, len(hash))
				}
				copy(l.Hash[:], hash)
				pos, err := event.ParseColumns(major, minor)
				if err != nil {
					return err
				}
				l.Last = pos
			}
			if err := rows.Err(); err != nil {
				return err
			}
			lb.rows[tenant] = l
			return nil
		})
	}
	if b.Len() == 1 {
		return nil
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		clear(lb.rows) // partly loaded: load again next time
		if !conn.IsClosed() {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return fmt.Errorf("%s: load ledger: %w", lb.name, err)
	}
	return nil
}

// upsertLedgerSQL writes a tenant's row from a book that counted none of
// its events ($11 = 0): a row another holder wrote meanwhile is not
// overwritten (ErrLedgerMoved).
const upsertLedgerSQL = `INSERT INTO projection_ledger AS l
    (projection, generation, tenant_id, events, applied, parked, skipped, hash, pos_major, pos_minor)
VALUES ($1, $2::uuid, $3, $4, $5, $6, $7, $8, $9::text::numeric, $10::text::numeric)
ON CONFLICT (generation, tenant_id) DO UPDATE SET events = EXCLUDED.events, applied = EXCLUDED.applied,
    parked = EXCLUDED.parked, skipped = EXCLUDED.skipped, hash = EXCLUDED.hash,
    pos_major = EXCLUDED.pos_major, pos_minor = EXCLUDED.pos_minor, updated_at = now()
WHERE l.events = $11`

// updateLedgerSQL writes a tenant's row from the count the book had
// ($11 > 0). A row that is gone is not written again from the book's
// count: the tenant's rows were purged under it (an archive, a move's
// purge), and the events the book counted are no longer in the log
// (ErrLedgerMoved; the book forgets the row and reads it again).
const updateLedgerSQL = `UPDATE projection_ledger SET events = $4, applied = $5, parked = $6, skipped = $7, hash = $8,
    pos_major = $9::text::numeric, pos_minor = $10::text::numeric, updated_at = now()
WHERE generation = $2::uuid AND tenant_id = $3 AND events = $11 AND projection = $1`

const insertLedgerMarkSQL = `INSERT INTO projection_ledger_marks (generation, tenant_id, events, hash, pos_major, pos_minor)
VALUES ($1::uuid, $2, $3, $4, $5::text::numeric, $6::text::numeric)`

// ErrLedgerMoved: the ledger row is not where the book has it (another
// lease holder wrote it).
var ErrLedgerMoved = errors.New("ledger moved by another runner")

// LedgerUse says what became of one event: applied, parked, or skipped
// (not of the worker's types).
type LedgerUse int8

const (
	LedgerSkipped LedgerUse = iota
	LedgerApplied
	LedgerParked
)

// LedgerBatch is a batch's counts, queued and not yet committed.
type LedgerBatch struct {
	rows    map[string]Ledger
	was     map[string]int64 // the book's count of each tenant before the batch
	tenants []string         // in order of first appearance
}

// Queue counts recs (use(i) says what became of recs[i]) into a copy of
// the book and queues, per tenant of recs, its set_config, the row's upsert
// (guarded by the count the book had) and a mark when the count passed a
// multiple of LedgerMarkEvery, into b, which must run in the transaction
// that moves the checkpoint past recs. Commit the result once that
// transaction committed.
func (lb *LedgerBook) Queue(b *pgx.Batch, recs []event.Record, use func(i int) LedgerUse) LedgerBatch {
	lbt := lb.Count(recs, use)
	for _, t := range lbt.tenants {
		b.Queue(db.SetTenantSQL, t)
		lb.QueueTenant(b, lbt, t)
	}
	return lbt
}

// Count counts recs into a copy of the book, queuing nothing: QueueTenant
// then queues each tenant's rows where the batch has its setting already.
func (lb *LedgerBook) Count(recs []event.Record, use func(i int) LedgerUse) LedgerBatch {
	lbt := LedgerBatch{rows: map[string]Ledger{}, was: map[string]int64{}}
	for i, rec := range recs {
		l, ok := lbt.rows[rec.Tenant]
		if !ok {
			l = lb.rows[rec.Tenant]
			lbt.was[rec.Tenant] = l.Events
			lbt.tenants = append(lbt.tenants, rec.Tenant)
		}
		u := use(i)
		l.count(rec, u == LedgerApplied, u == LedgerParked)
		lbt.rows[rec.Tenant] = l
	}
	return lbt
}

// Tenants returns the tenants the batch counted events of, in order of
// their first event.
func (lbt LedgerBatch) Tenants() []string { return lbt.tenants }

// QueueTenant queues tenant t's upsert of lbt (guarded by the count the
// book had) and a mark when the count passed a multiple of LedgerMarkEvery,
// into b, where the tenant setting is t already; nothing if lbt counted no
// event of t.
func (lb *LedgerBook) QueueTenant(b *pgx.Batch, lbt LedgerBatch, t string) {
	if lb.queueRow(b, lbt, t) {
		lb.queueMark(b, lbt.rows[t], lbt.was[t], t)
	}
}

// queueRow queues tenant t's upsert of lbt, guarded by the count the book
// had; it reports whether lbt counted an event of t.
func (lb *LedgerBook) queueRow(b *pgx.Batch, lbt LedgerBatch, t string) bool {
	l, ok := lbt.rows[t]
	if !ok {
		return false
	}
	was := lbt.was[t]
	sql := upsertLedgerSQL
	if was > 0 {
		sql = updateLedgerSQL
	}
	b.Queue(sql, lb.name, lb.generation, t, l.Events, l.Applied, l.Parked, l.Skipped, l.Hash[:],
		u64(l.Last.Major), u64(l.Last.Minor), was).Exec(func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			delete(lb.rows, t) // read it again next time
			return ErrLedgerMoved
		}
		return nil
	})
	return true
}

// upsertLedgersSQL writes one tenant's rows of several books (a projection
// group's members) in one statement, each guarded as upsertLedgerSQL and
// updateLedgerSQL guard one: a row is updated only from the count its book
// had (was), and a row that does not exist is inserted only by a book that
// counted none of its events. It returns how many rows it wrote,
// which must be all of them.
const upsertLedgersSQL = `WITH u AS (
    SELECT * FROM unnest($2::text[], $3::uuid[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bytea[], $9::text[], $10::text[], $11::bigint[])
        AS u(projection, generation, events, applied, parked, skipped, hash, pos_major, pos_minor, was)
), upd AS (
    UPDATE projection_ledger l SET events = u.events, applied = u.applied, parked = u.parked, skipped = u.skipped, hash = u.hash,
        pos_major = u.pos_major::numeric, pos_minor = u.pos_minor::numeric, updated_at = now()
    FROM u WHERE l.generation = u.generation AND l.tenant_id = $1 AND l.events = u.was
    RETURNING 1
), ins AS (
    INSERT INTO projection_ledger (projection, generation, tenant_id, events, applied, parked, skipped, hash, pos_major, pos_minor)
    SELECT u.projection, u.generation, $1, u.events, u.applied, u.parked, u.skipped, u.hash, u.pos_major::numeric, u.pos_minor::numeric
    FROM u WHERE u.was = 0 AND NOT EXISTS (SELECT 1 FROM projection_ledger l WHERE l.generation = u.generation AND l.tenant_id = $1)
    ON CONFLICT (generation, tenant_id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)`

// queueTenantRows queues tenant t's rows of several books in one statement
// (and each book's mark when due), into b, where the tenant setting is t
// already: lbts[i] is books[i]'s batch. Books whose batch counted no event
// of t queue nothing.
func queueTenantRows(b *pgx.Batch, books []*LedgerBook, lbts []LedgerBatch, t string) {
	var (
		names, gens            []string
		events, applied, parks []int64
		skipped, was           []int64
		hashes                 [][]byte
		majors, minors         []string
	)
	for i, lb := range books {
		l, ok := lbts[i].rows[t]
		if !ok {
			continue
		}
		names, gens = append(names, lb.name), append(gens, lb.generation)
		events, applied, parks, skipped = append(events, l.Events), append(applied, l.Applied), append(parks, l.Parked), append(skipped, l.Skipped)
		hashes = append(hashes, l.Hash[:])
		majors, minors = append(majors, u64(l.Last.Major)), append(minors, u64(l.Last.Minor))
		was = append(was, lbts[i].was[t])
	}
	if len(names) == 0 {
		return
	}
	want := int64(len(names))
	b.Queue(upsertLedgersSQL, t, names, gens, events, applied, parks, skipped, hashes, majors, minors, was).QueryRow(func(row pgx.Row) error {
		var n int64
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n != want {
			for _, lb := range books {
				delete(lb.rows, t) // read them again next time
			}
			return fmt.Errorf("%w: %d of %d rows of tenant %q written", ErrLedgerMoved, n, want, t)
		}
		return nil
	})
	for i, lb := range books {
		if l, ok := lbts[i].rows[t]; ok {
			lb.queueMark(b, l, lbts[i].was[t], t)
		}
	}
}

// queueMark queues a mark of l when its count passed a multiple of
// LedgerMarkEvery since was.
func (lb *LedgerBook) queueMark(b *pgx.Batch, l Ledger, was int64, t string) {
	if markDue(l, was) {
		lb.queueMarkOf(b, l, t)
	}
}

// markDue says whether a ledger that counted was events and now l.Events
// has passed a multiple of LedgerMarkEvery.
func markDue(l Ledger, was int64) bool { return l.Events/LedgerMarkEvery != was/LedgerMarkEvery }

// queueMarkOf queues a mark of tenant t's figures l.
func (lb *LedgerBook) queueMarkOf(b *pgx.Batch, l Ledger, t string) {
	b.Queue(insertLedgerMarkSQL, lb.generation, t, l.Events, l.Hash[:], u64(l.Last.Major), u64(l.Last.Minor))
}

// Commit records a committed batch's counts in the book.
func (lb *LedgerBook) Commit(lbt LedgerBatch) {
	for t, l := range lbt.rows {
		lb.rows[t] = l
	}
}
