package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/esdb"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/replay"
)

// replayEnv is a connected replay service and what it needs closed.
type replayEnv struct {
	svc   *replay.Service
	close func()
}

// openReplay connects as serve does (DATABASE_URL or the embedded
// PostgreSQL; STRATA_EVENT_STORE for the log) and checks the schema.
func openReplay(ctx context.Context, e env, stderr io.Writer, batch int) (*replayEnv, error) {
	level := slog.LevelWarn
	if v := e.str("STRATA_LOG_LEVEL", ""); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("%w: STRATA_LOG_LEVEL: want debug, info, warn or error", replay.ErrInvalid)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// The owner connection (DATABASE_URL) runs the DDL of rebuilds; the
	// other pools log in as the serving logins when they are configured,
	// else as the owner's login, switching roles (this is an operator's
	// tool, not a serving process: no request's SQL reaches it).
	url, _, stopDB, err := e.database(ctx, logger)
	if errors.Is(err, errNoOwnerURL) {
		url, stopDB, err = "", func() {}, nil // status and dead letters need no owner; a rebuild says what to set
	}
	if err != nil {
		return nil, err
	}
	appURL, projURL := e.str("STRATA_APP_DATABASE_URL", url), e.str("STRATA_PROJECTOR_DATABASE_URL", url)
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, stopDB)
	fail := func(err error) (*replayEnv, error) {
		closeAll()
		return nil, err
	}
	// Per projection a rebuild holds two sessions at most (the shadow's and,
	// for the swap, the live one's lease) beside the log's reads.
	proj, err := db.OpenPool(ctx, projURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 16, AppName: "strata-replay"})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, proj.Close)
	app, err := db.OpenPool(ctx, appURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 2, AppName: "strata-replay"})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, app.Close)
	var owner *pgxpool.Pool // nil: rebuilds are refused with what to set
	if url != "" {
		// Sessions run as the projector and switch to strata_owner per DDL
		// transaction; one per projection's swap, plus the DDL.
		if owner, err = db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8, AppName: "strata-replay-owner"}); err != nil {
			return fail(err)
		}
		closers = append(closers, owner.Close)
	}
	switch err := db.Check(ctx, proj, e.mods.Lines()...); {
	case err != nil && db.IsUnavailable(err):
		return fail(fmt.Errorf("cannot reach the database (check DATABASE_URL and that PostgreSQL is up): %w", err))
	case errors.Is(err, db.ErrSchemaBehind):
		return fail(fmt.Errorf("%v: run `strata migrate up`", err))
	case err != nil:
		return fail(fmt.Errorf("read the schema version (has `strata migrate up` run?): %w", err))
	}
	var log replay.Log = postgres.New(app, proj)
	if es := e.str("STRATA_EVENT_STORE", "postgres"); es != "postgres" {
		store, err := esdb.Open(ctx, es, esdb.WithLogger(logger), esdb.WithNamespace(e.str("STRATA_ESDB_NAMESPACE", "strata")))
		if err != nil {
			return fail(fmt.Errorf("STRATA_EVENT_STORE: %w", err))
		}
		closers = append(closers, func() { store.Close() })
		log = store
	}
	policy, err := failurePolicy(e)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", replay.ErrInvalid, err))
	}
	mods := e.mods
	registry, err := mods.Registry()
	if err == nil {
		registry, err = protect(ctx, e, registry, app)
	}
	if err != nil {
		return fail(err)
	}
	// The process managers, as serve makes them (their settings decide how
	// a retried input is decided); the CLI never executes their commands.
	specs, err := mods.Processes(commandapi.Deps{Config: commands.Config{Registry: registry}}, e.get)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", replay.ErrInvalid, err))
	}
	var managers []process.Manager
	for _, sp := range specs {
		managers = append(managers, sp.Manager)
	}
	relays, closeRelays, err := relayRepublishers(e, logger)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", replay.ErrInvalid, err))
	}
	closers = append(closers, closeRelays)
	svc, err := replay.New(replay.Config{Pool: proj, App: app, Owner: owner, Log: log, Logger: logger,
		Projections: mods.Projections(), Processes: managers, Registry: registry,
		Runner:             projections.RunnerConfig{BatchSize: batch, Failures: policy},
		ConsumerProjection: relay.ConsumerProjection, Relays: relays})
	if err != nil {
		return fail(err)
	}
	return &replayEnv{svc: svc, close: closeAll}, nil
}

// actor names who runs the command, for the dead-letter store's records.
func actor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + name + "@" + host
}
