package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// LogStats gives the global log's head and the lag behind a position
// (*postgres.Store implements it).
type LogStats interface {
	Head(ctx context.Context) (event.Position, error)
	Lag(ctx context.Context, after event.Position) (events int64, oldest time.Time, err error)
}

// ProjectionStatus is what the admin route shows of one projection.
type ProjectionStatus struct {
	Name       string
	Checkpoint event.Position
	Head       event.Position
	LagEvents  int64
	LagSeconds float64 // age of the oldest event not yet applied; 0 when none
	// State is running, standby (this process waits while another runs
	// it), error (its runner retries a failing event), paused (a replay
	// operation holds it for a moment) or stopped (no process runs it).
	State     State
	LastError string
	ErrorAt   time.Time
	UpdatedAt time.Time
	// ParkedStreams and ParkedLetters count the streams parked now and the
	// dead letters waiting, over every tenant.
	ParkedStreams, ParkedLetters int64
}

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// App is a pool of the application role: checkpoints, leases and a
	// tenant's own events are read through it.
	App *pgxpool.Pool
	// Log gives the global head and lag (the projector role's view).
	Log LogStats
	// Names lists the projections to report, in order.
	Names []string
	// Local, when set, reports the runner of a projection in this process.
	Local func(name string) (RunnerStatus, bool)
	// Now defaults to time.Now.
	Now func() time.Time
	// ExternalLog says the event log is not this database's events table
	// (EventStoreDB): a tenant's view then reports the global lag, since
	// only PostgreSQL can count one tenant's events under RLS.
	ExternalLog bool
}

// Monitor reports projections' checkpoints, lag and status.
type Monitor struct{ cfg MonitorConfig }

// NewMonitor returns a Monitor.
func NewMonitor(cfg MonitorConfig) *Monitor {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{cfg: cfg}
}

// tenantLagSQL counts, per projection, the events it has not applied yet,
// and the oldest one's time. It runs as the application role under the
// tenant's setting, so row-level security restricts it to the tenant's own
// events. Each checkpoint probes the log's (tx_id, position) index; a
// projection that never ran counts from the start.
const tenantLagSQL = `SELECT n.name, count(e.position), min(e.recorded_at)
FROM unnest($1::text[]) AS n(name)
LEFT JOIN projection_checkpoints c ON c.projection = n.name
LEFT JOIN events e ON (e.tx_id, e.position) > (coalesce(c.pos_major, 0)::text::xid8, coalesce(c.pos_minor, 0)::bigint)
GROUP BY n.name`

// Tenant reports every projection as seen by one tenant: lag counts only
// the tenant's own events; checkpoint and head are the global log's.
func (m *Monitor) Tenant(ctx context.Context, tenant string) ([]ProjectionStatus, error) {
	if tenant == "" {
		return nil, db.ErrNoTenant
	}
	head, err := m.cfg.Log.Head(ctx)
	if err != nil {
		return nil, err
	}
	type lag struct {
		n      int64
		oldest time.Time
	}
	lags := map[string]lag{}
	cps, err := ReadCheckpoints(ctx, m.cfg.App)
	if err != nil {
		return nil, err
	}
	names := m.expand(cps)
	// The tenant's setting and the count in one round trip: a pipeline
	// runs as one implicit transaction, so set_config stays local to it.
	if m.cfg.ExternalLog {
		for _, name := range names {
			n, oldest, err := m.cfg.Log.Lag(ctx, cps[name].Position)
			if err != nil {
				return nil, err
			}
			lags[name] = lag{n: n, oldest: oldest}
		}
	}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	if !m.cfg.ExternalLog {
		b.Queue(tenantLagSQL, names).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var name string
				var l lag
				var oldest *time.Time
				if err := rows.Scan(&name, &l.n, &oldest); err != nil {
					return err
				}
				if oldest != nil {
					l.oldest = *oldest
				}
				lags[name] = l
			}
			return rows.Err()
		})
	}
	if err := m.cfg.App.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("tenant lag: %w", err)
	}
	leases, paused, err := heldLeases(ctx, m.cfg.App)
	if err != nil {
		return nil, err
	}
	out := make([]ProjectionStatus, 0, len(names))
	for _, name := range names {
		st := m.status(name, cps, leases, paused, head)
		if l := lags[name]; l.n > 0 {
			st.LagEvents = l.n
			st.LagSeconds = m.age(l.oldest)
		}
		out = append(out, st)
	}
	return out, nil
}

// All reports every projection over the whole log (every tenant).
func (m *Monitor) All(ctx context.Context) ([]ProjectionStatus, error) {
	head, err := m.cfg.Log.Head(ctx)
	if err != nil {
		return nil, err
	}
	cps, err := ReadCheckpoints(ctx, m.cfg.App)
	if err != nil {
		return nil, err
	}
	leases, paused, err := heldLeases(ctx, m.cfg.App)
	if err != nil {
		return nil, err
	}
	names := m.expand(cps)
	out := make([]ProjectionStatus, 0, len(names))
	for _, name := range names {
		st := m.status(name, cps, leases, paused, head)
		n, oldest, err := m.cfg.Log.Lag(ctx, st.Checkpoint)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			st.LagEvents, st.LagSeconds = n, m.age(oldest)
		}
		out = append(out, st)
	}
	return out, nil
}

// expand returns the configured names with each partitioned projection
// replaced by its partitions (LiveKeys): a partition is reported as a
// projection of its own, its lag counted from its checkpoint (every event
// after it, the other partitions' included, so an upper bound while it is
// behind; an idle partition moves its checkpoint to the head).
func (m *Monitor) expand(cps map[string]Checkpoint) []string { return LiveKeys(cps, m.cfg.Names) }

func (m *Monitor) age(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(m.cfg.Now().Sub(t).Seconds(), 0)
}

// status combines the checkpoint row, whether any session holds the lease,
// and this process's runner.
func (m *Monitor) status(name string, cps map[string]Checkpoint, leases, paused map[uint32]bool, head event.Position) ProjectionStatus {
	cp := cps[name]
	st := ProjectionStatus{Name: name, Checkpoint: cp.Position, Head: head, LastError: cp.LastError, ErrorAt: cp.ErrorAt, UpdatedAt: cp.UpdatedAt,
		ParkedStreams: cp.ParkedStreams, ParkedLetters: cp.ParkedLetters}
	held := leases[uint32(leaseKey(name))]
	var local RunnerStatus
	hasLocal := false
	if m.cfg.Local != nil {
		local, hasLocal = m.cfg.Local(name)
	}
	switch {
	case paused[uint32(leaseKey(name))]:
		st.State = StatePaused
	case hasLocal && (local.State == StateRunning || local.State == StateError):
		st.State = local.State
		if local.State == StateError {
			st.LastError, st.ErrorAt = local.LastError, local.ErrorAt
		}
	case held && cp.Status == StateError:
		st.State = StateError
	case hasLocal && local.State == StateStandby && held:
		st.State = StateStandby
	case held:
		st.State = StateRunning
	default:
		st.State = StateStopped
	}
	if st.State != StateError {
		st.LastError, st.ErrorAt = "", time.Time{}
	}
	if st.Head.Less(st.Checkpoint) {
		// The head is read first; a runner may pass it meanwhile.
		st.Head = st.Checkpoint
	}
	return st
}
