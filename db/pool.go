package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain"
)

// PoolConfig tunes a pool. Zero values take the defaults.
type PoolConfig struct {
	// Role is the role every connection switches to (RoleApp,
	// RoleProjector); "" keeps the login role (migrations, admin tasks).
	Role string
	// MaxConns defaults to 8: on a 2-core database host more connections
	// than 2-4x the cores only adds contention (notes/postgres-limits.md).
	MaxConns int32
	// AppName is reported in pg_stat_activity.
	AppName string
	// Tracer, when set, receives every query (OpenTelemetry, metrics).
	Tracer pgx.QueryTracer
	// Pooler is what url points at: PostgreSQL itself or a session-mode
	// pool ("", PoolerNone, PoolerSession), or a transaction-mode pooler
	// (PoolerTransaction; pooler.go): then no named prepared statements,
	// no session settings, and the role and search_path come from the
	// login's defaults, checked on every new connection.
	Pooler string
}

// OpenPool opens a pool on url whose connections run as cfg.Role in the
// strata schema. It does not wait for the database to be reachable: the
// first query reports that, so a service can start while its database is
// still coming up.
func OpenPool(ctx context.Context, url string, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message can echo the URL, password included: keep it out.
		return nil, errors.New("parse database url: invalid connection string")
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	} else {
		pc.MaxConns = 8
	}
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.HealthCheckPeriod = 15 * time.Second
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pooled := cfg.Pooler == PoolerTransaction
	switch cfg.Pooler {
	case "", PoolerNone, PoolerSession, PoolerTransaction:
	default:
		return nil, fmt.Errorf("pooler %q: want %s, %s or %s", cfg.Pooler, PoolerNone, PoolerSession, PoolerTransaction)
	}
	if pooled && cfg.Role == RoleProjector {
		return nil, errors.New("the projector's pool cannot go through a transaction-mode pooler: its leases are session advisory locks and its runners LISTEN")
	}
	// The session's settings are SET after connecting, not sent as
	// startup parameters: PgBouncer (any pool mode) refuses startup
	// parameters it does not know ("unsupported startup parameter:
	// search_path"), so a session-mode pool in front of PostgreSQL works
	// with the same pool as PostgreSQL itself (pooler.go).
	//
	// pg_temp last: without it in the path, PostgreSQL searches a
	// session's temporary schema first, so SQL run through a subverted
	// session could create a temporary table named like one of strata's
	// (events, order_list) and capture the reads and writes of every later
	// request on that pooled connection, of any tenant. Named last, a
	// temporary table never shadows a strata table.
	set := []string{"SET search_path TO " + Schema + ", pg_temp"}
	if cfg.Role != "" {
		set = append([]string{"SET ROLE " + pgx.Identifier{cfg.Role}.Sanitize()}, set...)
	}
	if cfg.Role == RoleProjector {
		// Projections write tables that grow from empty while one
		// connection keeps executing the same prepared statements. A
		// generic plan made while a table looked empty (a rebuild's fresh
		// shadow table, a read side truncated and re-analyzed) keeps a
		// sequential scan per batch as the table grows: measured 250
		// events/s instead of 22,000. Custom plans are made per execution,
		// against the table's current size; planning a few set-based
		// statements per batch costs far less than one bad plan.
		set = append(set, "SET plan_cache_mode TO force_custom_plan")
	}
	if cfg.AppName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.AppName
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	if role := cfg.Role; pooled {
		// Unnamed statements, self-contained per execution: any server
		// connection can run them. Nothing SET here would stick to a
		// server connection: the login's defaults give the role and the
		// search_path, and a session that does not start with them (the
		// defaults are missing) fails its pool's Acquire with what to run.
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if role == "" {
				return nil
			}
			return CheckPooledSession(ctx, c, role)
		}
	} else {
		stmt := strings.Join(set, "; ")
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, stmt) // one round trip (simple protocol)
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
}

// Beginner is the smallest interface WithTenantTx needs (pgxpool.Pool,
// pgx.Conn and pgx.Tx all satisfy it).
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ErrNoTenant is returned when a tenant-scoped transaction is asked for
// without a tenant in the context: we fail closed.
var ErrNoTenant = errors.New("db: no tenant in context")

// WithTenantTx runs fn in a transaction in which row-level security sees
// only the tenant carried by ctx. The setting is transaction-local, so a
// pooled connection never carries it into the next transaction. It commits
// when fn returns nil and rolls back otherwise.
func WithTenantTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	tenant, ok := domain.TenantFromContext(ctx)
	if !ok {
		return ErrNoTenant
	}
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := SetTenant(ctx, tx, string(tenant)); err != nil {
			return err
		}
		return fn(tx)
	})
}

// SetTenant sets the transaction-local tenant for RLS. Use it only inside a
// transaction; projections call it per event as the tenant changes.
func SetTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if tenant == "" {
		return ErrNoTenant
	}
	_, err := tx.Exec(ctx, "SELECT set_config('"+TenantSetting+"', $1, true)", tenant)
	return err
}

// SetTenantSQL is the statement SetTenant runs, for callers that queue it
// into a pgx.Batch to save a round trip. Its one argument is the tenant.
const SetTenantSQL = "SELECT set_config('" + TenantSetting + "', $1, true)"
