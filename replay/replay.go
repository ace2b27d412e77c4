package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/projections"
)

// Errors every operation may return, wrapped with what happened and what
// to do next. The CLI turns them into exit codes (docs/replay.md).
var (
	// ErrInvalid: the request cannot be carried out as asked (an unknown
	// projection, a tenant that is no tenant ID, --from for a projection
	// that aggregates several streams, conflicting flags).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: what was asked for does not exist (a dead letter).
	ErrNotFound = errors.New("not found")
	// ErrNothingToDo: the operation found nothing to change (no parked
	// stream to retry, a letter already retried or discarded).
	ErrNothingToDo = errors.New("nothing to do")
	// ErrBusy: another operation holds the projection, or its runner did
	// not yield in time. Retry later.
	ErrBusy = errors.New("busy")
	// ErrNoOwner (with ErrInvalid): a rebuild needs the owner connection
	// and the service has none whose login may become db.RoleOwner.
	ErrNoOwner = errors.New("rebuilding creates and swaps tables as strata_owner, and this process has no owner connection " +
		"(DATABASE_URL, the login that runs `strata migrate up`): set DATABASE_URL for the query role to rebuild over HTTP, " +
		"or run `strata replay rebuild` with it")
)

// Log is what the tooling needs of the event store: reading the global log
// (a rebuild) and single streams (a rebuild from a position), locating
// stream versions (the contiguity check) and its head and lag
// (*postgres.Store and *esdb.Store implement it).
type Log interface {
	eventstore.Log
	eventstore.VersionLocator
	ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error)
	Lag(ctx context.Context, after event.Position) (events int64, oldest time.Time, err error)
}

// Config configures a Service.
type Config struct {
	// Pool runs as db.RoleProjector: the shadow runners, dead-letter
	// retries and status. In a serving process its login is the projector
	// login, which cannot become the owner.
	Pool *pgxpool.Pool
	// Owner is the owner connection: its login is a member of
	// db.RoleOwner and db.RoleProjector (the role `strata migrate up`
	// runs as) and its sessions run as db.RoleProjector, switching to
	// db.RoleOwner per DDL transaction. A rebuild creates, indexes,
	// analyzes, swaps and drops tables on it, and holds the live
	// projection's lease for the swap on one of its sessions (the swap
	// renames tables, which only their owner may). nil means Pool (a tool
	// whose one login is the owner's); a rebuild then fails with ErrInvalid
	// if Pool's login is not a member of db.RoleOwner.
	Owner *pgxpool.Pool
	// App, when set, runs as db.RoleApp: a tenant's status counts only
	// that tenant's events through it (row-level security).
	App *pgxpool.Pool
	// Log is the event log.
	Log Log
	// Projections are the projections the tooling knows: every module's
	// (required). A rebuild needs projections.Retargetable.
	Projections []projections.Projection
	// Processes are the process managers the tooling knows: their parked
	// instances are retried and discarded through the process runtime,
	// their instances listed (optional).
	Processes []process.Manager
	// ConsumerProjection, when set, lets the dead-letter operations retry
	// the letters of broker-fed consumers (relay.Consumer). A consumer's
	// checkpoint row names the projection it applies and that projection's
	// tables (projections.ConsumerInfo); the service takes the projection
	// of that name from Projections, writing into those tables, and
	// ConsumerProjection returns what re-applies the consumer's letters
	// under the consumer's name (relay.ConsumerProjection). Without it a
	// consumer's letters are listed and discarded, not retried. Status and
	// rebuilds leave consumers alone (they read no log).
	ConsumerProjection func(consumer string, p projections.Projection) projections.Projection
	// Relays re-publish the dead letters of relays (relay.Republisher),
	// each named after its relay's checkpoint (relay_<topic>): the relay
	// parks a stream whose event it cannot publish under that name, and
	// the dead-letter operations accept the name wherever they accept a
	// projection's. A retry re-publishes the stream's letters in order
	// with it and unparks the stream, holding the relay's pause lock (the
	// relay publishes nothing meanwhile). Without it a relay's letters are
	// listed and discarded, not retried.
	Relays []projections.Projection
	// Registry decodes payloads (required): the process's one registry. It
	// is the registry of every runner, shared read, retry and consumer the
	// service starts, whatever Runner.Registry says.
	Registry *event.Registry
	// Runner tunes the runners of rebuilds (BatchSize defaults to 5000 for
	// them: larger batches fold more of an order's events into one row
	// change; DeadLetters is always on; Failures applies). Checkpoint,
	// Filter, OnBatch, Wake, Shared and Progress are set by the rebuild.
	Runner projections.RunnerConfig
	// FoldRows bounds the rows a rebuild holds in memory for each
	// projection that folds (projections.Folder): past it, the rebuild
	// writes what it folded and applies the rest of the log as the runner
	// does. 0 means DefaultFoldRows; a negative value turns folding off.
	FoldRows int
	// YieldTimeout bounds the wait for a projection's runner to yield its
	// lease (default 30s).
	YieldTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service runs the operations.
type Service struct {
	cfg    Config
	byName map[string]projections.Projection
	relays map[string]projections.Projection
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil || cfg.Log == nil {
		return nil, errors.New("replay: a projector pool and an event log are required")
	}
	if len(cfg.Projections) == 0 || cfg.Registry == nil {
		return nil, errors.New("replay: the projections and the event registry are required")
	}
	// One registry reaches every path that decodes events (ARCHITECTURE
	// decision 9): a rebuild's runners once fell back to another registry
	// than its shared reads, parked every event they could not decode and
	// swapped in tables without those rows.
	cfg.Runner.Registry = cfg.Registry
	if cfg.Runner.BatchSize == 0 {
		cfg.Runner.BatchSize = 5000
	}
	if cfg.YieldTimeout <= 0 {
		cfg.YieldTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Owner == nil {
		cfg.Owner = cfg.Pool
	}
	s := &Service{cfg: cfg, byName: map[string]projections.Projection{}}
	for _, p := range cfg.Projections {
		if err := projections.CheckDecodable(p, cfg.Registry); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if len(p.Name()) > 63-len(rebuildSuffix) {
			return nil, fmt.Errorf("replay: projection name %q is too long to rebuild (at most %d characters)", p.Name(), 63-len(rebuildSuffix))
		}
		s.byName[p.Name()] = p
	}
	s.relays = map[string]projections.Projection{}
	for _, p := range cfg.Relays {
		if _, taken := s.byName[p.Name()]; taken {
			return nil, fmt.Errorf("replay: relay %s has the name of a projection", p.Name())
		}
		s.relays[p.Name()] = p
	}
	return s, nil
}

// Logger is where the service logs (Config.Logger): what a caller reports
// to a client only in summary, such as a background rebuild's failure,
// goes here in full.
func (s *Service) Logger() *slog.Logger { return s.cfg.Logger }

// Names returns the names of the projections the service knows, in order.
func (s *Service) Names() []string { return projections.Names(s.cfg.Projections) }

// projection resolves a name.
func (s *Service) projection(name string) (projections.Projection, error) {
	p, ok := s.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown projection %q: want one of %s", ErrInvalid, name, strings.Join(s.Names(), ", "))
	}
	return p, nil
}

// resolve returns the named projections (all when names is empty).
// DefaultFoldRows is Config.FoldRows's default. The orders module's folds
// hold 134-282 bytes per row (measured over 300,000 events), so about
// 250 MB per projection at the bound, before the garbage collector's
// headroom (`strata replay rebuild` runs with GOGC=400).
const DefaultFoldRows = 1_000_000

func (s *Service) foldRows() int {
	if s.cfg.FoldRows == 0 {
		return DefaultFoldRows
	}
	return s.cfg.FoldRows
}

func (s *Service) resolve(names []string) ([]projections.Projection, error) {
	if len(names) == 0 {
		return s.cfg.Projections, nil
	}
	var out []projections.Projection
	for _, n := range names {
		p, err := s.projection(n)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// checkTenant validates a tenant ID from the operator.
func checkTenant(tenant string) error {
	if _, err := domain.ParseTenantID(tenant); err != nil {
		return fmt.Errorf("%w: tenant %q is not a tenant ID ([a-z0-9-]{1,63})", ErrInvalid, tenant)
	}
	return nil
}

// tenants returns the tenants to look at: the one given, or every tenant
// of the log.
func (s *Service) tenants(ctx context.Context, tenant string) ([]string, error) {
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return nil, err
		}
		return []string{tenant}, nil
	}
	return projections.Tenants(ctx, s.cfg.Pool)
}

// exclusive takes a projection's lease for a tool on a session of the
// projector pool, translating the errors.
func (s *Service) exclusive(ctx context.Context, key string) (*projections.Exclusive, error) {
	return s.exclusiveOn(ctx, s.cfg.Pool, key)
}

// exclusiveOn takes a projection's lease on a session of pool: the owner
// pool for work that changes tables under the lease (a swap, an abort).
// Leases are advisory locks of the database, whoever the session's role.
func (s *Service) exclusiveOn(ctx context.Context, pool *pgxpool.Pool, key string) (*projections.Exclusive, error) {
	x, err := projections.AcquireExclusive(ctx, pool, key, s.cfg.YieldTimeout)
	switch {
	case errors.Is(err, projections.ErrBusy):
		return nil, fmt.Errorf("%w: another replay operation is working on %s (a rebuild swapping, a retry or a discard): retry when it is done", ErrBusy, key)
	case errors.Is(err, projections.ErrNoYield):
		return nil, fmt.Errorf("%w: the runner of %s did not yield its lease within %s (a very long batch, or a strata version older than this tool): retry, or stop that runner", ErrBusy, key, s.cfg.YieldTimeout)
	case err != nil:
		return nil, fmt.Errorf("take the lease of %s: %w", key, err)
	}
	return x, nil
}

// checkpoints reads checkpoint rows through the projector pool.
func (s *Service) checkpoints(ctx context.Context, names ...string) (map[string]projections.Checkpoint, error) {
	return projections.ReadCheckpoints(ctx, s.cfg.Pool, names...)
}

// CheckOwner reports whether the owner connection's login may become
// db.RoleOwner, as a rebuild (other than From) needs: an error wrapping
// ErrInvalid and ErrNoOwner when it may not. Callers that start a rebuild
// in the background check it first, to refuse at once.
func (s *Service) CheckOwner(ctx context.Context) error {
	var ok bool
	if err := s.cfg.Owner.QueryRow(ctx, `SELECT pg_has_role(session_user, $1, 'MEMBER')`, db.RoleOwner).Scan(&ok); err != nil {
		return fmt.Errorf("check the owner connection: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: %w", ErrInvalid, ErrNoOwner)
	}
	return nil
}

// ownerTx runs fn in a transaction as db.RoleOwner (DDL on shadow tables).
func (s *Service) ownerTx(ctx context.Context, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE strata_owner"); err != nil {
		s.cfg.Logger.Warn("cannot switch to the owner role", "error", err.Error())
		return fmt.Errorf("%w: %w", ErrInvalid, ErrNoOwner)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
