package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
)

// Erasure (ARCHITECTURE decision 13; docs/tenants.md, "Erasure") is a
// resumable workflow of steps, each recorded in the tenant's
// tenant_erasures row when it is done:
//
//  1. suppress: status erasing (audited), then the acknowledgement barrier
//     (member.go): every live serving process has applied it and finished
//     the tenant's requests it had admitted;
//  2. quiesce: no export of the tenant is running, no import of it holds
//     its lock, no move of it is open; appends that were in progress have
//     ended (the log refuses the tenant's events from the moment erasing
//     committed: migration 009's trigger); and every live runner, whatever
//     its kind and lease (projections, rebuilds, process managers, the
//     relay: RunnerLiveFunc), has passed the tenant's last event;
//  3. inventory: every store that holds the tenant's data, with its mode
//     and its count before, taken once and kept (a rerun reports the same
//     counts): the tables every migration line declares tenant-scoped or
//     tenant-referencing (db.Classify: the log, read models, export
//     archives, the relay's watermill-sql copy, moves' bookkeeping…, and
//     the rebuilds' shadow tables), the external stores (the broker's
//     subjects, an EventStoreDB), tenant_audit;
//  4. erase: each store in its mode, in batches, its count after taken as
//     the verification; a store left with rows is unknown;
//  5. verify: the schema again (a table created since is included), every
//     store recounted; unknown blocks completion;
//  6. receipt: written, with its content hash and the tables kept by
//     declaration (the erasure's own record, the directory's tombstone);
//     the tenant's row becomes an erased tombstone.
//
// Every run first compares the schema with the declarations: a table in no
// classification stops it before the first step it would run (and again
// before steps 4 and 5), so an erasure never claims a store it does not
// know. A step that fails stops the workflow with the error recorded;
// running Erase again resumes at the first step not done. Nothing is
// destroyed before step 4.

// Erasure steps, in order.
const (
	StepSuppress  = "suppress"
	StepQuiesce   = "quiesce"
	StepInventory = "inventory"
	StepErase     = "erase"
	StepVerify    = "verify"
	StepReceipt   = "receipt"
)

// ErasureSteps are the steps in order.
var ErasureSteps = []string{StepSuppress, StepQuiesce, StepInventory, StepErase, StepVerify, StepReceipt}

// Store states.
const (
	StatePending = "pending"
	StateDone    = "done"
	StateUnknown = "unknown"
)

// Errors of the Eraser.
var (
	ErrBarrierTimeout = errors.New("the acknowledgement barrier timed out: some serving process has not acknowledged the erasing status; nothing was destroyed, run the erasure again")
	ErrQuiesceTimeout = errors.New("quiescence timed out: some runner has not passed the tenant's last event; nothing was destroyed, run the erasure again")
	ErrUnknownStores  = errors.New("some stores are unknown after erasure: the erasure is not complete, run it again")
	// ErrUnclassified: the schema has a table no migration line declares
	// (db.ErrUnclassified); the erasure does not start destroying.
	ErrUnclassified = db.ErrUnclassified
	// ErrErasureRunning: another process runs this tenant's erasure now.
	ErrErasureRunning = errors.New("the erasure of this tenant is running in another process: follow it with `strata tenants status`")
)

// eraseLockClass is the first key of the session advisory lock that keeps
// one runner per tenant's erasure ("STER"); the second is the tenant's
// hashtext. The lock lives as long as the runner's session: a runner
// killed with SIGKILL leaves none behind.
const eraseLockClass int32 = 0x53544552

// ExternalStore is a store outside the PostgreSQL database that holds a
// tenant's data (the broker's messages, an EventStoreDB log). cmd/strata
// gives the Eraser those the installation configures.
type ExternalStore interface {
	// Name identifies the store in the receipt, e.g. "nats:strata_events".
	Name() string
	Kind() StoreKind
	// Count returns how many of the tenant's items the store holds now.
	Count(ctx context.Context, tenant domain.TenantID) (int64, error)
	// Erase removes the tenant's items (idempotent).
	Erase(ctx context.Context, tenant domain.TenantID) error
	// Verification describes Count's query, for the receipt.
	Verification(tenant domain.TenantID) string
}

// EraserConfig configures an Eraser.
type EraserConfig struct {
	// Pool is the owner connection (as Store's): a login that may become
	// strata_owner and strata_eraser.
	Pool  *pgxpool.Pool
	Store *Store
	// Lease is the serving processes' membership lease: a member whose
	// heartbeat is older is gone (default DefaultLease).
	Lease time.Duration
	// BarrierTimeout and QuiesceTimeout bound steps 1 and 2 (default 1m).
	BarrierTimeout time.Duration
	QuiesceTimeout time.Duration
	// BatchSize is how many rows one delete transaction removes (default
	// 2000): a big tenant does not hold one giant transaction.
	BatchSize int
	// Lines are the module migration lines the database is migrated with
	// (the engine's is always included): their table declarations are the
	// inventory (db.Classify).
	Lines []db.Line
	// External are the stores outside PostgreSQL.
	External []ExternalStore
	// RunnerLiveFunc reports whether a runner (a projection_checkpoints
	// row) is running somewhere (holds its lease, whatever its lease
	// family: cmd/strata passes pgsession.CheckpointLive); nil: every
	// checkpoint whose status is running or error counts as live.
	// Quiescence waits only for live runners: a stopped one holds none of
	// the tenant's events in memory, and finds none in the log once they
	// are deleted.
	RunnerLiveFunc func(ctx context.Context, name string) (bool, error)
	// ExportStaleAfter is how old a running export job's heartbeat may be
	// before the job counts as abandoned rather than running (default 30s,
	// portability.StaleAfter): quiescence waits for the running ones.
	ExportStaleAfter time.Duration
	// ProgressFunc, if set, is told of each step and each store's batches
	// (the CLI's progress on stderr).
	ProgressFunc func(p Progress)
	// AfterFunc, if set, runs at each failpoint of the workflow (after
	// each step, after each store); its error stops the workflow there
	// (tests). The same points are failpoints "tenancy.erase.<point>".
	AfterFunc func(ctx context.Context, tenant domain.TenantID, point string) error
	// PollInterval is how often the barrier resends and the quiescence
	// looks again (default 50ms).
	PollInterval time.Duration
}

// Progress is one report of the workflow's progress.
type Progress struct {
	Tenant  domain.TenantID
	Step    string
	Store   string // during the erase step
	Done    int64  // rows or items erased so far of Store
	Total   int64  // Store's count before
	Message string
}

// Eraser runs erasure workflows.
type Eraser struct {
	cfg    EraserConfig
	tables *db.Classification
	fence  *Fence
}

// NewEraser returns an Eraser. It fails on an invalid table declaration
// of cfg.Lines (db.Classify).
func NewEraser(cfg EraserConfig) (*Eraser, error) {
	if cfg.Pool == nil || cfg.Store == nil {
		return nil, ErrNoOwner
	}
	tables, err := db.Classify(cfg.Lines...)
	if err != nil {
		return nil, err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 2000
	}
	// The barrier's and the quiescence's defaults are the Fence's.
	fence := NewFence(FenceConfig{Pool: cfg.Pool, Store: cfg.Store, Lease: cfg.Lease, BarrierTimeout: cfg.BarrierTimeout,
		QuiesceTimeout: cfg.QuiesceTimeout, PollInterval: cfg.PollInterval, RunnerLiveFunc: cfg.RunnerLiveFunc, ExportStaleAfter: cfg.ExportStaleAfter})
	return &Eraser{cfg: cfg, tables: tables, fence: fence}, nil
}

// Erasure is a tenant's workflow row, as `strata tenants status` and GET
// /v1/platform/tenants/{id}/erasure show it.
type Erasure struct {
	Tenant      domain.TenantID `json:"tenant"`
	ReceiptID   string          `json:"receipt_id"`
	Reason      string          `json:"reason"`
	RequestedBy string          `json:"requested_by"`
	AuditFloor  int64           `json:"-"`
	// auditThrough is the last tenant_audit row this run anonymized: the
	// rows after it record calls made while the erasure ran (a status read
	// over HTTP, say), which the verification does not wait for.
	auditThrough int64
	StartedAt    time.Time            `json:"started_at"`
	UpdatedAt    time.Time            `json:"updated_at"`
	Steps        map[string]time.Time `json:"steps"`
	Barrier      BarrierState         `json:"barrier"`
	Quiesce      QuiesceState         `json:"quiesce"`
	Stores       []StoreState         `json:"stores"`
	LastError    string               `json:"last_error,omitempty"`
	Receipt      *Receipt             `json:"receipt,omitempty"`
	FinishedAt   *time.Time           `json:"finished_at,omitempty"`
}

// NextStep is the first step not done ("" when finished).
func (e Erasure) NextStep() string {
	for _, s := range ErasureSteps {
		if _, ok := e.Steps[s]; !ok {
			return s
		}
	}
	return ""
}

// BarrierState is what the barrier saw.
type BarrierState struct {
	Version      int64    `json:"version"`       // the directory version of the erasing change
	MembersLive  int      `json:"members_live"`  // heartbeat within the lease
	MembersAcked int      `json:"members_acked"` // of those, seen_version >= Version
	MembersGone  int      `json:"members_gone"`  // heartbeat older than the lease: fenced
	Waiting      []string `json:"waiting,omitempty"`
	WaitedMS     int64    `json:"waited_ms"`
}

// QuiesceState is what the quiescence waited for.
type QuiesceState struct {
	LastEvent       string   `json:"last_event"` // the tenant's last event in the log, "tx_id/position"; "" when none
	OpenXacts       int      `json:"open_transactions"`
	RunnersWaitedOn []string `json:"runners_waited_on"`
	Lagging         []string `json:"lagging,omitempty"`
	// Busy is the other work on the tenant still going when the quiescence
	// last looked: running exports, an import, an open move.
	Busy     []string `json:"busy,omitempty"`
	WaitedMS int64    `json:"waited_ms"`
}

// StoreState is one store of the inventory.
type StoreState struct {
	Name         string     `json:"name"`
	Kind         StoreKind  `json:"kind"`
	Mode         Mode       `json:"mode"`
	State        string     `json:"state"`
	Before       int64      `json:"count_before"`
	After        *int64     `json:"count_after,omitempty"`
	Verification string     `json:"verification"`
	VerifiedAt   *time.Time `json:"verified_at,omitempty"`
	Note         string     `json:"note,omitempty"`
}

// progress reports p.
func (e *Eraser) progress(p Progress) {
	if e.cfg.ProgressFunc != nil {
		e.cfg.ProgressFunc(p)
	}
}

// point is a failpoint of the workflow: "after-<step>" or
// "after-store" (every store; STRATA_FAILPOINTS=tenancy.erase.after-store=N
// kills after the Nth).
func (e *Eraser) point(ctx context.Context, tenant domain.TenantID, name string) error {
	failpoint.Hit("tenancy.erase." + name)
	if e.cfg.AfterFunc != nil {
		if err := e.cfg.AfterFunc(ctx, tenant, name); err != nil {
			return fmt.Errorf("erase %s: at %s: %w", tenant, name, err)
		}
	}
	return nil
}

// Status returns the tenant's erasure workflow (ErrNotFound when none was
// started).
func (e *Eraser) Status(ctx context.Context, a Actor, tenant domain.TenantID) (Erasure, error) {
	if err := e.cfg.Store.audit(ctx, a, "erasure_status", tenant, nil); err != nil {
		return Erasure{}, err
	}
	return e.load(ctx, tenant)
}

const erasureColumns = `tenant, receipt_id::text, reason, requested_by, audit_floor, started_at, updated_at, steps, barrier, quiesce, stores, coalesce(last_error, ''), receipt, finished_at`

func (e *Eraser) load(ctx context.Context, tenant domain.TenantID) (Erasure, error) {
	var out Erasure
	err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		var steps, barrier, quiesce, stores, receipt []byte
		err := tx.QueryRow(ctx, `SELECT `+erasureColumns+` FROM tenant_erasures WHERE tenant = $1`, tenant).Scan(
			&out.Tenant, &out.ReceiptID, &out.Reason, &out.RequestedBy, &out.AuditFloor, &out.StartedAt, &out.UpdatedAt,
			&steps, &barrier, &quiesce, &stores, &out.LastError, &receipt, &out.FinishedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no erasure of tenant %q was started", domain.ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		out.Steps = map[string]time.Time{}
		_ = json.Unmarshal(steps, &out.Steps)
		_ = json.Unmarshal(barrier, &out.Barrier)
		_ = json.Unmarshal(quiesce, &out.Quiesce)
		_ = json.Unmarshal(stores, &out.Stores)
		if receipt != nil {
			out.Receipt = new(Receipt)
			if err := json.Unmarshal(receipt, out.Receipt); err != nil {
				return fmt.Errorf("decode the receipt: %w", err)
			}
		}
		return nil
	})
	if out.Stores == nil {
		out.Stores = []StoreState{}
	}
	return out, err
}

// save writes the workflow's state columns and stamps step as done (step
// "": no stamp).
func (e *Eraser) save(ctx context.Context, w *Erasure, step string) error {
	if step != "" {
		w.Steps[step] = time.Now().UTC()
	}
	steps, _ := json.Marshal(w.Steps)
	barrier, _ := json.Marshal(w.Barrier)
	quiesce, _ := json.Marshal(w.Quiesce)
	stores, _ := json.Marshal(w.Stores)
	var receipt []byte
	if w.Receipt != nil {
		receipt, _ = json.Marshal(w.Receipt)
	}
	return e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `UPDATE tenant_erasures SET steps = $2, barrier = $3, quiesce = $4, stores = $5, receipt = $6,
			finished_at = $7, last_error = nullif($8, ''), updated_at = now() WHERE tenant = $1 RETURNING updated_at`,
			w.Tenant, steps, barrier, quiesce, stores, receipt, w.FinishedAt, w.LastError).Scan(&w.UpdatedAt)
	})
}

// recordError keeps the error that stopped the workflow in its row.
func (e *Eraser) recordError(tenant domain.TenantID, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg := err.Error()
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	_ = e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tenant_erasures SET last_error = $2, updated_at = now() WHERE tenant = $1`, tenant, msg)
		return err
	})
}

// Erase starts the tenant's erasure, or resumes it at its first step not
// done, and runs it to the end. An erasure that is finished returns as it
// is (its receipt). reason is required (recorded). Errors: ErrNotFound (no
// such tenant), domain.ErrInvalid, ErrBarrierTimeout, ErrQuiesceTimeout,
// ErrUnknownStores, the database's and the external stores'.
func (e *Eraser) Erase(ctx context.Context, a Actor, tenant domain.TenantID, reason string) (Erasure, error) {
	w, err := e.Begin(ctx, a, tenant, reason)
	if err != nil || w.NextStep() == "" {
		return w, err
	}
	return e.Run(ctx, w)
}

// Begin records the call (audited) and creates the tenant's workflow row
// if there is none, without running a step: what the HTTP job answers
// before it runs the rest in the background (Run). A finished erasure is
// returned as it is.
func (e *Eraser) Begin(ctx context.Context, a Actor, tenant domain.TenantID, reason string) (Erasure, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > 500 {
		return Erasure{}, fmt.Errorf("%w: an erasure needs a reason of 1 to 500 bytes (recorded)", domain.ErrInvalid)
	}
	if err := e.cfg.Store.audit(ctx, a, "erase", tenant, map[string]any{"reason": reason}); err != nil {
		return Erasure{}, err
	}
	w, err := e.start(ctx, a, tenant, reason)
	if err != nil {
		return Erasure{}, err
	}
	if w.NextStep() == "" {
		// Finished: the call just audited is anonymized like the others;
		// an error recorded after the receipt (a crash at its failpoint)
		// is moot.
		if _, err := e.anonymizeAudit(ctx, tenant, w.ReceiptID); err != nil {
			return w, err
		}
		if w.LastError != "" {
			w.LastError = ""
			if err := e.save(ctx, &w, ""); err != nil {
				return w, err
			}
		}
	}
	return w, nil
}

// Run runs w from its first step not done to the end; an error is also
// recorded in the workflow's row (last_error).
func (e *Eraser) Run(ctx context.Context, w Erasure) (Erasure, error) {
	conn, err := e.cfg.Pool.Acquire(ctx)
	if err != nil {
		return w, err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, eraseLockClass, string(w.Tenant)).Scan(&got); err != nil {
		return w, fmt.Errorf("take the erasure's lock: %w", err)
	}
	if !got {
		return w, fmt.Errorf("erase %s: %w", w.Tenant, ErrErasureRunning)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, eraseLockClass, string(w.Tenant)); err != nil {
			conn.Conn().Close(uctx) //nolint:errcheck // a session that ends releases it
		}
	}()
	// Read again under the lock: another runner may have moved it on.
	if cur, err := e.load(ctx, w.Tenant); err == nil {
		w = cur
	}
	if w.NextStep() == "" {
		return w, nil
	}
	w.LastError = ""
	if err := e.run(ctx, &w); err != nil {
		e.recordError(w.Tenant, err)
		cur, lerr := e.load(context.WithoutCancel(ctx), w.Tenant)
		if lerr == nil {
			w = cur
		}
		return w, err
	}
	return w, nil
}

// start creates the workflow row (once) and returns it.
func (e *Eraser) start(ctx context.Context, a Actor, tenant domain.TenantID, reason string) (Erasure, error) {
	err := e.cfg.Store.ownerTx(ctx, func(tx pgx.Tx) error {
		t, err := getTenant(ctx, tx, tenant, true)
		if err != nil {
			return err
		}
		if t.Placement != DefaultPlacement {
			return fmt.Errorf("%w: tenant %s is placed in %s; erasing a tenant outside the shared database is not supported yet (its data is in that placement's database)", domain.ErrRejected, tenant, t.Placement)
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		id := hex.EncodeToString(b[:])
		_, err = tx.Exec(ctx, `INSERT INTO tenant_erasures (tenant, receipt_id, reason, requested_by, audit_floor)
			VALUES ($1, $2::uuid, $3, $4, (SELECT coalesce(max(id), 0) FROM tenant_audit WHERE action <> 'erase' OR tenant IS DISTINCT FROM $1))
			ON CONFLICT (tenant) DO NOTHING`, t.ID, id, reason, a.Subject)
		return err
	})
	if err != nil {
		return Erasure{}, err
	}
	return e.load(ctx, tenant)
}

func (e *Eraser) run(ctx context.Context, w *Erasure) error {
	if _, _, err := e.schema(ctx); err != nil {
		return fmt.Errorf("erase %s: before step %s: %w", w.Tenant, w.NextStep(), err)
	}
	steps := []struct {
		name string
		fn   func(context.Context, *Erasure) error
	}{
		{StepSuppress, e.suppress},
		{StepQuiesce, e.quiesce},
		{StepInventory, e.inventory},
		{StepErase, e.erase},
		{StepVerify, e.verify},
		{StepReceipt, e.receipt},
	}
	for _, s := range steps {
		if _, done := w.Steps[s.name]; done {
			continue
		}
		e.progress(Progress{Tenant: w.Tenant, Step: s.name, Message: "step " + s.name})
		if err := s.fn(ctx, w); err != nil {
			return fmt.Errorf("erase %s: step %s: %w", w.Tenant, s.name, err)
		}
		if err := e.save(ctx, w, s.name); err != nil {
			return fmt.Errorf("erase %s: record step %s: %w", w.Tenant, s.name, err)
		}
		if err := e.point(ctx, w.Tenant, "after-"+s.name); err != nil {
			return err
		}
	}
	return nil
}
