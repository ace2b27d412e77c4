package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/tenancy"
)

// Phases of a move (tenant_moves.phase, migration 014).
const (
	PhaseCopying    = "copying"
	PhaseFrozen     = "frozen"
	PhaseSwitched   = "switched"
	PhaseFinished   = "finished"
	PhaseRolledBack = "rolled_back"
)

// Move is one row of tenant_moves: a tenant's move and how far it got.
// CopiedEvents and CopiedKeys are the tenant's events and idempotency
// records the target holds (counted again when a killed run resumes, since
// a batch may have committed after the last save).
type Move struct {
	ID           int64             `json:"id"`
	Tenant       domain.TenantID   `json:"tenant"`
	Source       string            `json:"source"`
	Target       string            `json:"target"`
	Phase        string            `json:"phase"`
	CopiedEvents int64             `json:"copied_events"`
	CopiedKeys   int64             `json:"copied_keys"`
	Remaining    int64             `json:"remaining_events"`
	FrozenAt     *time.Time        `json:"frozen_at,omitempty"`
	FreezeMS     *float64          `json:"freeze_ms,omitempty"`
	Verified     map[string]string `json:"verified"`
	Receipt      json.RawMessage   `json:"receipt,omitempty"`
	LastError    string            `json:"last_error,omitempty"`
	RequestedBy  string            `json:"requested_by"`
	StartedAt    time.Time         `json:"started_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	FinishedAt   *time.Time        `json:"finished_at,omitempty"`
}

// Side is one end of a move: a placement's pools.
type Side struct {
	Name  string
	App   *pgxpool.Pool // the strata_app login: the tenant's rows under its setting
	Proj  *pgxpool.Pool // the strata_projector login: checkpoints, the log's end
	Owner *pgxpool.Pool // the owner connection: freezes, the purge as strata_eraser
	// Keys is the keyring of the side's database: a move copies the data
	// keys of the personal data it copies (nil: the tenant has none).
	Keys *personal.Keyring
}

// MoverConfig configures a Mover.
type MoverConfig struct {
	// Control is the owner connection of the control-plane database (the
	// placement pool): the directory and tenant_moves.
	Control *pgxpool.Pool
	// Directory is the platform path on Control: its barrier.
	Directory *tenancy.Store
	// Open returns the pools of a placement; the Mover does not close them.
	Open func(ctx context.Context, placement string) (Side, error)
	// Projections name the runners that must have applied the copied
	// events on the target before the switch, and on the source before the
	// purge; Tables are the read-model tables compared before the switch.
	Projections []string
	Tables      []string
	// LogEnd returns the newest committed position of a side's log (the
	// PostgreSQL store's LastCommitted): the runners must reach it.
	LogEnd func(ctx context.Context, s Side) (event.Position, error)
	// Batch is the events per copy transaction (default 500); FreezeAt the
	// remaining events below which the write freeze begins (default 200).
	Batch    int
	FreezeAt int
	// CatchUpTimeout bounds the wait for the target's runners during the
	// freeze (default 30s): a move that cannot verify lifts the freeze and
	// stays in copying, to be run again.
	CatchUpTimeout time.Duration
	Lease          time.Duration // the directory members' lease (default tenancy.DefaultLease)
	BarrierTimeout time.Duration // default 1m
	Poll           time.Duration // default 20ms
	Logger         *slog.Logger
	// Progress, if set, is called as the move goes on.
	Progress func(Move)
}

// Mover moves tenants between placements (docs/scaling.md, "Moving a
// tenant"): copy while the tenant writes, freeze its writes on the source,
// copy the rest, verify the target's read models, switch the directory
// with an acknowledgement barrier; finish purges the source, back returns.
type Mover struct {
	cfg MoverConfig
}

// Errors of a move.
var (
	ErrMoveOpen     = fmt.Errorf("%w: the tenant has an unfinished move", domain.ErrRejected)
	ErrNoMove       = fmt.Errorf("%w: no unfinished move of the tenant", domain.ErrNotFound)
	ErrVerification = errors.New("the target's read models differ from the source's")
)

// NewMover returns a Mover.
func NewMover(cfg MoverConfig) *Mover {
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.FreezeAt <= 0 {
		cfg.FreezeAt = 200
	}
	if cfg.CatchUpTimeout <= 0 {
		cfg.CatchUpTimeout = 30 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = tenancy.DefaultLease
	}
	if cfg.BarrierTimeout <= 0 {
		cfg.BarrierTimeout = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Mover{cfg: cfg}
}

func (m *Mover) control(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.OwnerTx(ctx, m.cfg.Control, fn)
}

const moveColumns = `id, tenant, source, target, phase, copied_events, copied_keys, remaining, frozen_at, freeze_ms, verified,
	coalesce(receipt::text, ''), coalesce(last_error, ''), requested_by, started_at, updated_at, finished_at`

func scanMove(row pgx.Row) (Move, error) {
	var mv Move
	var verified []byte
	var receipt string
	err := row.Scan(&mv.ID, &mv.Tenant, &mv.Source, &mv.Target, &mv.Phase, &mv.CopiedEvents, &mv.CopiedKeys, &mv.Remaining,
		&mv.FrozenAt, &mv.FreezeMS, &verified, &receipt, &mv.LastError, &mv.RequestedBy, &mv.StartedAt, &mv.UpdatedAt, &mv.FinishedAt)
	_ = json.Unmarshal(verified, &mv.Verified)
	if receipt != "" {
		mv.Receipt = json.RawMessage(receipt)
	}
	return mv, err
}

// Moves lists the tenant's moves, newest first ("" : every tenant's).
func (m *Mover) Moves(ctx context.Context, tenant domain.TenantID) ([]Move, error) {
	var out []Move
	err := m.control(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+moveColumns+` FROM tenant_moves WHERE $1 = '' OR tenant = $1 ORDER BY id DESC`, tenant)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Move, error) { return scanMove(r) })
		return err
	})
	return out, err
}

// open returns the tenant's unfinished move.
func (m *Mover) open(ctx context.Context, tenant domain.TenantID) (Move, error) {
	var mv Move
	err := m.control(ctx, func(tx pgx.Tx) (err error) {
		mv, err = scanMove(tx.QueryRow(ctx, `SELECT `+moveColumns+` FROM tenant_moves WHERE tenant = $1 AND phase IN ('copying', 'frozen', 'switched')`, tenant))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Move{}, fmt.Errorf("%w: %s", ErrNoMove, tenant)
	}
	return mv, err
}

// Start records a move of the tenant to target, or returns its unfinished
// move to the same target (resume). The tenant must be active.
func (m *Mover) Start(ctx context.Context, subject string, tenant domain.TenantID, target string) (Move, error) {
	var mv Move
	err := m.control(ctx, func(tx pgx.Tx) error {
		var status, current string
		err := tx.QueryRow(ctx, `SELECT status, placement FROM tenants WHERE id = $1 FOR UPDATE`, tenant).Scan(&status, &current)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no tenant %q in the directory", domain.ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		mv, err = scanMove(tx.QueryRow(ctx, `SELECT `+moveColumns+` FROM tenant_moves WHERE tenant = $1 AND phase IN ('copying', 'frozen', 'switched')`, tenant))
		switch {
		case err == nil && mv.Target == target:
			return nil // resume (a switched move only records its freeze, if a crash left it unrecorded)
		case err == nil:
			return fmt.Errorf("%w (%s to %s, %s): finish it (`move --finish`) or go back (`move --back`) first", ErrMoveOpen, mv.Source, mv.Target, mv.Phase)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if status != string(tenancy.StatusActive) {
			return fmt.Errorf("%w: tenant %s is %s: only an active tenant is moved", domain.ErrRejected, tenant, status)
		}
		if current == target {
			return fmt.Errorf("%w: tenant %s is already in %s", domain.ErrRejected, tenant, target)
		}
		if err := m.refuseParkedProcesses(ctx, tenant, current); err != nil {
			return err
		}
		var tstatus string
		err = tx.QueryRow(ctx, `SELECT status FROM placements WHERE name = $1`, target).Scan(&tstatus)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no placement %q (`strata placements list`)", domain.ErrInvalid, target)
		}
		if err != nil {
			return err
		}
		if tstatus != StatusActive {
			return fmt.Errorf("%w: placement %s is %s", domain.ErrRejected, target, tstatus)
		}
		detail, _ := json.Marshal(map[string]string{"from": current, "to": target})
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_audit (subject, action, tenant, detail) VALUES ($1, 'move', $2, $3)`, subject, tenant, detail); err != nil {
			return err
		}
		mv, err = scanMove(tx.QueryRow(ctx, `INSERT INTO tenant_moves (tenant, source, target, requested_by) VALUES ($1, $2, $3, $4) RETURNING `+moveColumns,
			tenant, current, target, subject))
		return err
	})
	return mv, err
}

// refuseParkedProcesses refuses to move a tenant with a parked process
// instance: its dead letter holds the source log's position and would not
// follow it, so the instance would stay parked in the target with nothing
// to retry. Retry or discard it first (`strata replay dlq`).
func (m *Mover) refuseParkedProcesses(ctx context.Context, tenant domain.TenantID, placement string) error {
	src, err := m.cfg.Open(ctx, placement)
	if err != nil {
		return err
	}
	var parked []string
	err = tenantTx(ctx, src, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT process || '/' || instance FROM process_instances WHERE parked ORDER BY 1 LIMIT 5`)
		if err != nil {
			return err
		}
		parked, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return fmt.Errorf("look for the tenant's parked process instances in %s: %w", placement, err)
	}
	if len(parked) > 0 {
		return fmt.Errorf("%w: tenant %s has parked process instances (%s): retry or discard them first (`strata replay dlq list`), their dead letters do not move",
			domain.ErrRejected, tenant, strings.Join(parked, ", "))
	}
	return nil
}

// save writes the move's progress.
func (m *Mover) save(ctx context.Context, mv *Move) error {
	verified, _ := json.Marshal(mv.Verified)
	var receipt any
	if len(mv.Receipt) > 0 {
		receipt = string(mv.Receipt)
	}
	err := m.control(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `UPDATE tenant_moves SET phase = $2, copied_events = $3, copied_keys = $4, remaining = $5, frozen_at = $6, freeze_ms = $7,
			verified = $8, receipt = $9::jsonb, last_error = nullif($10, ''), updated_at = now(),
			finished_at = CASE WHEN $2 IN ('finished', 'rolled_back') THEN coalesce(finished_at, now()) END
			WHERE id = $1 RETURNING updated_at`, mv.ID, mv.Phase, mv.CopiedEvents, mv.CopiedKeys, mv.Remaining, mv.FrozenAt, mv.FreezeMS,
			verified, receipt, mv.LastError).Scan(&mv.UpdatedAt)
	})
	if err == nil && m.cfg.Progress != nil {
		m.cfg.Progress(*mv)
	}
	return err
}

// fail records err on the move and returns it.
func (m *Mover) fail(ctx context.Context, mv *Move, err error) error {
	mv.LastError = err.Error()
	if serr := m.save(context.WithoutCancel(ctx), mv); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// Run takes the move from its phase to switched: copy, freeze, final
// copy, verify, switch. It is resumable: run it again after any failure
// or crash and it goes on from what is committed.
func (m *Mover) Run(ctx context.Context, mv Move) (Move, error) {
	src, err := m.cfg.Open(ctx, mv.Source)
	if err != nil {
		return mv, m.fail(ctx, &mv, fmt.Errorf("open the source %s: %w", mv.Source, err))
	}
	dst, err := m.cfg.Open(ctx, mv.Target)
	if err != nil {
		return mv, m.fail(ctx, &mv, fmt.Errorf("open the target %s: %w", mv.Target, err))
	}
	mv.LastError = ""
	if mv.Phase != PhaseSwitched {
		// A run killed after a batch committed but before the move saved
		// its counts: count what the target holds instead.
		if err := tenantTx(ctx, dst, mv.Tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM idempotency_keys)`).Scan(&mv.CopiedEvents, &mv.CopiedKeys)
		}); err != nil {
			return mv, m.fail(ctx, &mv, fmt.Errorf("count the tenant's rows in %s: %w", dst.Name, err))
		}
	}
	if mv.Phase == PhaseCopying {
		// A target that was this tenant's source before (a move back) may
		// still refuse its writes.
		if err := unfreeze(ctx, dst, mv.Tenant); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		// Before the first copy: the target's process managers pass the
		// tenant's events over, every one of them a copy until the switch.
		if err := arriving(ctx, dst, mv.Tenant, mv.Source); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		if err := m.copyKeys(ctx, &mv, src, dst); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		for {
			n, err := m.copyEvents(ctx, &mv, src, dst, true)
			if err != nil {
				return mv, m.fail(ctx, &mv, err)
			}
			if n < m.cfg.Batch && mv.Remaining <= int64(m.cfg.FreezeAt) {
				break
			}
		}
		failpoint.Hit("move.before-freeze")
		if err := freeze(ctx, src, mv.Tenant, "move to "+mv.Target); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		now := time.Now()
		mv.FrozenAt, mv.Phase = &now, PhaseFrozen
		if err := m.save(ctx, &mv); err != nil {
			return mv, err
		}
	}
	began := time.Now()
	if mv.FrozenAt != nil && began.Sub(*mv.FrozenAt) > 0 {
		began = *mv.FrozenAt // resumed: the freeze began before this run
	}
	if mv.Phase == PhaseFrozen {
		failpoint.Hit("move.frozen")
		// Where the freeze goes, step by step (logged once per move).
		steps := newStepTimer()
		if err := awaitWriters(ctx, src, m.cfg.Poll); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		steps.done("writers")
		for {
			n, err := m.copyEvents(ctx, &mv, src, dst, false)
			if err != nil {
				return mv, m.fail(ctx, &mv, err)
			}
			if n == 0 {
				break
			}
		}
		if err := m.copyKeys(ctx, &mv, src, dst); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		steps.done("copy")
		// Both sides' runners past the tenant's last event: the source's
		// read models are what the target's must equal.
		if err := m.caughtUp(ctx, dst, m.cfg.CatchUpTimeout); err != nil {
			return mv, m.abort(ctx, &mv, src, fmt.Errorf("the target's runners: %w", err))
		}
		steps.done("target_runners")
		if err := m.caughtUp(ctx, src, m.cfg.CatchUpTimeout); err != nil {
			return mv, m.abort(ctx, &mv, src, fmt.Errorf("the source's runners: %w", err))
		}
		steps.done("source_runners")
		if err := m.verify(ctx, &mv, src, dst); err != nil {
			return mv, m.abort(ctx, &mv, src, err)
		}
		steps.done("verify")
		// The source's process managers have decided every event of the
		// tenant (caughtUp above): their state goes with it, and the
		// target's pass over the copies.
		if err := copyProcessState(ctx, src, dst, mv.Tenant); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		if err := arrived(ctx, dst, mv.Tenant); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		steps.done("process_state")
		failpoint.Hit("move.before-switch")
		if err := m.switchDirectory(ctx, &mv); err != nil {
			return mv, m.fail(ctx, &mv, err)
		}
		steps.done("switch")
		m.cfg.Logger.Info("move: the freeze's steps", append([]any{"tenant", mv.Tenant, "target", mv.Target}, steps.attrs()...)...)
	}
	if mv.Phase == PhaseSwitched && mv.FreezeMS == nil {
		failpoint.Hit("move.switched")
		ms := float64(time.Since(began).Microseconds()) / 1000
		mv.FreezeMS = &ms
		if err := m.save(ctx, &mv); err != nil {
			return mv, err
		}
	}
	return mv, nil
}

// stepTimer times the steps of the freeze.
type stepTimer struct {
	last  time.Time
	names []string
	took  []time.Duration
}

func newStepTimer() *stepTimer { return &stepTimer{last: time.Now()} }

func (t *stepTimer) done(name string) {
	now := time.Now()
	t.names, t.took = append(t.names, name), append(t.took, now.Sub(t.last))
	t.last = now
}

// attrs are the steps as slog key-value pairs, in milliseconds.
func (t *stepTimer) attrs() []any {
	out := make([]any, 0, 2*len(t.names))
	for i, n := range t.names {
		out = append(out, n+"_ms", float64(t.took[i].Microseconds())/1000)
	}
	return out
}

// abort lifts the freeze of a move that could not verify: the tenant
// writes to its source again, the move is back in copying with the error.
func (m *Mover) abort(ctx context.Context, mv *Move, src Side, cause error) error {
	if err := unfreeze(ctx, src, mv.Tenant); err != nil {
		return m.fail(ctx, mv, errors.Join(cause, err))
	}
	mv.Phase, mv.FrozenAt = PhaseCopying, nil
	return m.fail(ctx, mv, fmt.Errorf("%w; the freeze is lifted and the tenant stays in %s: run the move again", cause, mv.Source))
}

// switchDirectory names the target in the directory and waits for every
// serving process to acknowledge it.
func (m *Mover) switchDirectory(ctx context.Context, mv *Move) error {
	var version int64
	err := m.control(ctx, func(tx pgx.Tx) error {
		var placement string
		if err := tx.QueryRow(ctx, `SELECT placement, version FROM tenants WHERE id = $1 FOR UPDATE`, mv.Tenant).Scan(&placement, &version); err != nil {
			return err
		}
		if placement != mv.Target {
			if err := tx.QueryRow(ctx, `UPDATE tenants SET placement = $2 WHERE id = $1 RETURNING version`, mv.Tenant, mv.Target).Scan(&version); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE tenant_moves SET phase = 'switched', updated_at = now() WHERE id = $1`, mv.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("switch the directory: %w", err)
	}
	mv.Phase = PhaseSwitched
	if _, err := m.cfg.Directory.AwaitBarrier(ctx, tenancy.BarrierConfig{Pool: m.cfg.Control, Lease: m.cfg.Lease, Timeout: m.cfg.BarrierTimeout, Poll: m.cfg.Poll},
		mv.Tenant, version); err != nil {
		// Switched: a process that has not acknowledged still routes the
		// tenant to the source, which refuses its writes (the freeze stays).
		return fmt.Errorf("switched, but not every serving process acknowledged (the source still refuses the tenant's writes): %w", err)
	}
	return nil
}

// tenantTx runs fn as the side's application login under the tenant's
// setting: row-level security confines it to the tenant's rows.
func tenantTx(ctx context.Context, s Side, tenant domain.TenantID, fn func(pgx.Tx) error) error {
	return db.WithTenantTx(domain.NewContext(ctx, tenant), s.App, fn)
}

// projectorTx runs fn as the side's projector login under the tenant's
// setting: the read models' own policies confine it to the tenant's rows.
func projectorTx(ctx context.Context, s Side, tenant domain.TenantID, fn func(pgx.Tx) error) error {
	return db.WithTenantTx(domain.NewContext(ctx, tenant), s.Proj, fn)
}

// ownerTx runs fn on the side's owner connection as strata_owner.
func ownerTx(ctx context.Context, s Side, fn func(pgx.Tx) error) error {
	if err := db.OwnerTx(ctx, s.Owner, fn); err != nil {
		return fmt.Errorf("placement %s: %w", s.Name, err)
	}
	return nil
}

// freeze makes the side refuse the tenant's writes (migration 014).
func freeze(ctx context.Context, s Side, tenant domain.TenantID, reason string) error {
	err := ownerTx(ctx, s, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenant_write_freezes (tenant, reason) VALUES ($1, $2) ON CONFLICT (tenant) DO NOTHING`, tenant, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("freeze the tenant's writes on %s: %w", s.Name, err)
	}
	return nil
}

func unfreeze(ctx context.Context, s Side, tenant domain.TenantID) error {
	err := ownerTx(ctx, s, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM tenant_write_freezes WHERE tenant = $1`, tenant)
		return err
	})
	if err != nil {
		return fmt.Errorf("lift the tenant's write freeze on %s: %w", s.Name, err)
	}
	return nil
}

// awaitWriters waits until every transaction that was writing to the log
// or the idempotency records when it began has ended: one may hold the
// tenant's rows from before the freeze; every later one is refused.
func awaitWriters(ctx context.Context, s Side, poll time.Duration) error {
	const writers = `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE relation IN ('strata.events'::regclass, 'strata.idempotency_keys'::regclass) AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()`
	var open []string
	if err := s.App.QueryRow(ctx, writers).Scan(&open); err != nil {
		return fmt.Errorf("find the writers in progress on %s: %w", s.Name, err)
	}
	for len(open) > 0 {
		if err := s.App.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks WHERE virtualtransaction = ANY ($1)`, open).Scan(&open); err != nil {
			return fmt.Errorf("wait for the writers in progress on %s: %w", s.Name, err)
		}
		if len(open) > 0 && !pgsession.Sleep(ctx, poll) {
			return ctx.Err()
		}
	}
	return nil
}

// cursor is where the copy goes on in the source's log: the source's
// position of the newest event of the tenant the target holds.
func cursor(ctx context.Context, mv *Move, src, dst Side) (tx string, pos int64, err error) {
	var last string
	err = tenantTx(ctx, dst, mv.Tenant, func(t pgx.Tx) error {
		return t.QueryRow(ctx, `SELECT event_id::text FROM events ORDER BY tx_id DESC, position DESC LIMIT 1`).Scan(&last)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "0", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read the target's newest event: %w", err)
	}
	err = tenantTx(ctx, src, mv.Tenant, func(t pgx.Tx) error {
		return t.QueryRow(ctx, `SELECT tx_id::text, position FROM events WHERE event_id = $1::uuid`, last).Scan(&tx, &pos)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("the target %s holds event %s of the tenant, which its source %s does not: refusing to copy over it", dst.Name, last, src.Name)
	}
	return tx, pos, err
}

// copyEvents copies one batch of the tenant's events, in the source's log
// order, into the target's log (same IDs, streams, versions, types,
// metadata and times; the target's own positions), skipping any the
// target holds. While the tenant writes (horizon true) it reads only below
// the source's oldest open transaction, as every reader of the log does;
// frozen, every event of the tenant has committed and none can appear
// below the cursor, so it reads to the end.
func (m *Mover) copyEvents(ctx context.Context, mv *Move, src, dst Side, horizon bool) (int, error) {
	txText, pos, err := cursor(ctx, mv, src, dst)
	if err != nil {
		return 0, err
	}
	type row struct {
		txText, stream, eventID, eventType string
		version                            int64
		schema                             int32
		data, metadata                     []byte
		recorded                           time.Time
	}
	var batch []row
	var remaining int64
	err = tenantTx(ctx, src, mv.Tenant, func(tx pgx.Tx) error {
		// tx_id as text under another name: an output column named tx_id
		// would capture ORDER BY tx_id and sort the log as text.
		rows, err := tx.Query(ctx, `SELECT tx_id::text AS tx_text, stream_id, event_id::text, event_type, version, schema_version, data, metadata, recorded_at
			FROM events WHERE (tx_id, position) > ($1::text::xid8, $2) AND (NOT $3 OR tx_id < pg_snapshot_xmin(pg_current_snapshot()))
			ORDER BY tx_id, position LIMIT $4`, txText, pos, horizon, m.cfg.Batch)
		if err != nil {
			return err
		}
		batch, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.txText, &x.stream, &x.eventID, &x.eventType, &x.version, &x.schema, &x.data, &x.metadata, &x.recorded)
			return x, err
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE (tx_id, position) > ($1::text::xid8, $2)`, txText, pos).Scan(&remaining)
	})
	if err != nil {
		return 0, fmt.Errorf("read the tenant's events from %s: %w", src.Name, err)
	}
	mv.Remaining = remaining - int64(len(batch))
	if len(batch) == 0 {
		return 0, m.save(ctx, mv)
	}
	streams, ids, types, data, metadata := make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch)), make([]string, len(batch))
	versions, schemas, recorded := make([]int64, len(batch)), make([]int32, len(batch)), make([]time.Time, len(batch))
	for i, x := range batch {
		streams[i], ids[i], types[i], versions[i], schemas[i] = x.stream, x.eventID, x.eventType, x.version, x.schema
		data[i], metadata[i], recorded[i] = string(x.data), string(x.metadata), x.recorded
	}
	var keyIDs []string
	for _, x := range batch {
		if id := event.SealedKey(x.data); id != "" && !slices.Contains(keyIDs, id) {
			keyIDs = append(keyIDs, id)
		}
	}
	if len(keyIDs) > 0 && (src.Keys == nil || dst.Keys == nil) {
		return 0, errors.New("the tenant's events hold sealed personal data, and the move has no keyring to copy its keys")
	}
	var inserted int64
	err = tenantTx(ctx, dst, mv.Tenant, func(tx pgx.Tx) error {
		// The keys first, in the same transaction: no reader of the
		// target sees a sealed field without its key.
		if _, err := personal.CopyKeys(ctx, src.Keys, dst.Keys, tx, string(mv.Tenant), keyIDs); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at)
			SELECT current_setting('app.tenant_id'), s, v, e::uuid, t, sv, d::jsonb, md::jsonb, r
			FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $8::timestamptz[])
			     WITH ORDINALITY AS x(s, v, e, t, sv, d, md, r, n)
			ORDER BY n
			ON CONFLICT (tenant_id, event_id) DO NOTHING`, streams, versions, ids, types, schemas, data, metadata, recorded)
		inserted = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("write the tenant's events to %s: %w", dst.Name, err)
	}
	// Wake the target's runners (projections.NotifyAppends's channel).
	_, _ = dst.App.Exec(ctx, `SELECT pg_notify($1, '')`, projections.NotifyChannel)
	mv.CopiedEvents += inserted
	failpoint.Hit("move.copied-batch")
	return len(batch), m.save(ctx, mv)
}

// copyKeys copies the tenant's idempotency records the target lacks, so
// that a key is honoured across the move.
func (m *Mover) copyKeys(ctx context.Context, mv *Move, src, dst Side) error {
	after := ""
	for {
		var keys, hashes []string
		var responses [][]byte
		var created []time.Time
		err := tenantTx(ctx, src, mv.Tenant, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT key, request_hash, response, created_at FROM idempotency_keys WHERE key > $1 ORDER BY key LIMIT $2`, after, m.cfg.Batch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k, h string
				var r []byte
				var c time.Time
				if err := rows.Scan(&k, &h, &r, &c); err != nil {
					return err
				}
				keys, hashes, responses, created = append(keys, k), append(hashes, h), append(responses, r), append(created, c)
			}
			return rows.Err()
		})
		if err != nil {
			return fmt.Errorf("read the tenant's idempotency records from %s: %w", src.Name, err)
		}
		if len(keys) == 0 {
			return nil
		}
		err = tenantTx(ctx, dst, mv.Tenant, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response, created_at)
				SELECT current_setting('app.tenant_id'), k, h, r, c FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[]) AS x(k, h, r, c)
				ON CONFLICT (tenant_id, key) DO NOTHING`, keys, hashes, responses, created)
			mv.CopiedKeys += tag.RowsAffected()
			return err
		})
		if err != nil {
			return fmt.Errorf("write the tenant's idempotency records to %s: %w", dst.Name, err)
		}
		after = keys[len(keys)-1]
	}
}

// caughtUp waits until every projection of the side has applied its log
// to the end committed now.
func (m *Mover) caughtUp(ctx context.Context, s Side, timeout time.Duration) error {
	head, err := m.cfg.LogEnd(ctx, s)
	if err != nil {
		return err
	}
	// The configured projections, and every other runner of the side
	// (its process managers, the relay) that runs: a process manager
	// behind the tenant's last event would decide it after its state was
	// copied, and the target never would.
	names := slices.Clone(m.cfg.Projections)
	rows, err := s.App.Query(ctx, `SELECT projection FROM projection_checkpoints WHERE status = 'running' ORDER BY projection`)
	if err != nil {
		return err
	}
	running, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range running {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	deadline := time.Now().Add(timeout)
	var woke time.Time
	for {
		cps, err := projections.ReadCheckpoints(ctx, s.App)
		if err != nil {
			return err
		}
		var behind []string
		// A partitioned projection has caught up once each partition has;
		// the row it was split off stays where the split left it.
		for _, name := range projections.LiveKeys(cps, names) {
			cp, ok := cps[name]
			if !ok || cp.Position.Less(head) {
				behind = append(behind, name)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runners %v of %s have not reached %s within %s (does a serving process run them?)", behind, s.Name, head.Token(), timeout)
		}
		// Wake them (projections.NotifyAppends's channel): in the freeze
		// nothing appends, so a runner that read just before the last
		// commit became visible would otherwise sleep until its poll
		// (measured: a second of the freeze, in one move of three).
		if time.Since(woke) >= 100*time.Millisecond {
			_, _ = s.App.Exec(ctx, `SELECT pg_notify($1, '')`, projections.NotifyChannel)
			woke = time.Now()
		}
		if !pgsession.Sleep(ctx, m.cfg.Poll) {
			return ctx.Err()
		}
	}
}

// LogColumns are the read-model columns that hold a placement's own log
// coordinates (a row's last applied position, say): each placement has
// its own log, so they differ after a move by design and are left out of
// its comparison (docs/extending.md, "Read models and placements").
var LogColumns = []string{"position", "last_position", "tx_id", "pos_major", "pos_minor"}

// verify compares the tenant's rows of every read-model table: count and
// digest on each side, which must be equal (LogColumns left out).
func (m *Mover) verify(ctx context.Context, mv *Move, src, dst Side) error {
	sums := func(s Side) (map[string]string, error) {
		out := map[string]string{}
		err := projectorTx(ctx, s, mv.Tenant, func(tx pgx.Tx) error {
			for _, table := range m.cfg.Tables {
				var n int64
				var sum string
				q := `SELECT count(*), coalesce(md5(string_agg(r, E'\n' ORDER BY r)), '') FROM (SELECT (to_jsonb(t) - $1::text[])::text AS r FROM ` + pgx.Identifier{table}.Sanitize() + ` t) x`
				if err := tx.QueryRow(ctx, q, LogColumns).Scan(&n, &sum); err != nil {
					return fmt.Errorf("checksum %s: %w", table, err)
				}
				out[table] = fmt.Sprintf("%d rows md5 %s", n, sum)
			}
			return nil
		})
		return out, err
	}
	a, err := sums(src)
	if err != nil {
		return err
	}
	b, err := sums(dst)
	if err != nil {
		return err
	}
	for _, table := range m.cfg.Tables {
		if a[table] != b[table] {
			return fmt.Errorf("%w: %s: %s in %s, %s in %s", ErrVerification, table, a[table], src.Name, b[table], dst.Name)
		}
	}
	mv.Verified = b
	return nil
}
