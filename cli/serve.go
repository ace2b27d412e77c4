package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli/openapi"
	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/esdb"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgembed"
	"github.com/strata-es/strata/module"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/telemetry"
)

// Roles a serve process can run.
const (
	roleCommand   = "command"
	roleQuery     = "query"
	roleProjector = "projector"
)

var allRoles = []string{roleCommand, roleQuery, roleProjector}

type roleSet map[string]bool

func parseRoles(s string) (roleSet, error) {
	rs := roleSet{}
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		ok := false
		for _, known := range allRoles {
			ok = ok || r == known
		}
		if !ok {
			return nil, fmt.Errorf("unknown role %q: want a comma-separated subset of %s", r, strings.Join(allRoles, ","))
		}
		rs[r] = true
	}
	if len(rs) == 0 {
		return nil, errors.New("no roles given")
	}
	return rs, nil
}

func (rs roleSet) String() string {
	var out []string
	for _, r := range allRoles {
		if rs[r] {
			out = append(out, r)
		}
	}
	return strings.Join(out, ",")
}

// shutdownTimeout bounds how long serve waits for in-flight work on
// SIGTERM before it exits anyway.
const shutdownTimeout = 20 * time.Second

// serveFlags defines serve's flags (the deploy/ manifests are checked
// against them).
func serveFlags(e env, stderr io.Writer) (fs *flag.FlagSet, addr, roles *string) {
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr = fs.String("addr", e.str("STRATA_ADDR", ":8080"), "listen address")
	roles = fs.String("roles", e.str("STRATA_ROLES", strings.Join(allRoles, ",")), "comma-separated roles: command,query,projector")
	return fs, addr, roles
}

func cmdServe(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	fs, addr, rolesFlag := serveFlags(e, stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	roles, err := parseRoles(*rolesFlag)
	if err != nil {
		fmt.Fprintln(stderr, "strata serve:", err)
		return exitUsage
	}
	logger, err := newLogger(e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata serve:", err)
		return exitUsage
	}
	slog.SetDefault(logger)
	if err := serve(ctx, e, *addr, roles, logger, stdout); err != nil {
		logger.Error("serve failed", "error", err.Error())
		fmt.Fprintln(stderr, "strata serve:", err)
		return exitFailure
	}
	return exitOK
}

// testSpanExporter, set by tests only, receives serve's spans.
var testSpanExporter sdktrace.SpanExporter

// app is what the roles of one serve process share. Each role's wiring
// (wireCommand, wireQuery, wireProjector) adds its routes, background loops
// and readiness checks to it.
type app struct {
	mods       module.Set      // the application's bounded contexts
	registry   *event.Registry // every module's codecs: the one registry of the process
	logger     *slog.Logger
	url        string          // the owner connection's ("" without DATABASE_URL)
	appPool    *pgxpool.Pool   // db.RoleApp
	projPool   *pgxpool.Pool   // db.RoleProjector
	pools      *servingPools   // the pools, the owner connection and the logins' warnings
	store      *postgres.Store // idempotency records (and events, by default)
	events     eventstore.Store
	log        eventLog
	external   bool // events live outside PostgreSQL (EventStoreDB)
	verifier   auth.TokenVerifier
	router     *mux.Router // unauthenticated: /livez, /readyz (/metrics: STRATA_METRICS_ADDR)
	api        *mux.Router // bearer-authenticated
	commandAPI *mux.Router // api, rate-limited as commands
	queryAPI   *mux.Router // api, rate-limited as queries
	waitSlot   slotGate    // a tenant's slot for a consistency wait
	appended   *broadcast  // fires after every committed append in this process
	env        env         // configuration, for the roles' own settings
	metrics    *telemetry.Metrics
	tracing    bool // an exporter is configured
	workers    []worker
	readiness  []readinessCheck
	readyInfo  []func(body map[string]any) // adds to /readyz's body (query replicas)
	processes  []process.Spec              // the process managers this process runs (projector role)
	allSpecs   []process.Spec              // every module's process managers, made once
	specsMade  bool
	wake       *projections.Signal // appends happened: wakes projection and process runners
	// placement is the placement this app serves: "" for the process's
	// own database (the pool), else one of serve_placements.go's.
	placement    string
	directory    *pgxpool.Pool        // a placement's: the control plane's projector pool (its tenants' settings)
	epoch        int64                // the placement's epoch: consistency tokens carry it
	groupCommit  []postgres.Option    // the store's options (STRATA_GROUP_COMMIT), for placements' stores
	commandChain []mux.MiddlewareFunc // the command routes' middleware, after routing by placement
	queryChain   []mux.MiddlewareFunc // the query and admin routes' middleware
}

// projectionWake returns the signal that wakes this process's runners
// after appends (here or, through LISTEN, in other processes), starting
// its forwarder and listener on first use.
func (a *app) projectionWake() *projections.Signal {
	if a.wake != nil {
		return a.wake
	}
	a.wake = projections.NewSignal()
	a.workers = append(a.workers,
		worker{name: "projection wake-up", run: func(ctx context.Context) error {
			projections.Forward(ctx, a.appended.C, a.wake)
			return nil
		}},
		worker{name: "projection listener", run: func(ctx context.Context) error {
			return projections.Listen(ctx, a.projPool, a.wake, a.logger)
		}},
	)
	return a.wake
}

// slotGate takes a slot for the request's tenant or refuses with the error.
type slotGate func(*http.Request) (release func(), err error)

// eventLog is what the read side needs of the event store: the global log,
// its head and lag, where stream versions are (replay.Log: also single
// streams, for rebuilds from a position).
type eventLog = replay.Log

// worker is a background loop of a role; it runs until ctx is cancelled
// and then returns after finishing its current unit of work.
type worker struct {
	name string
	run  func(ctx context.Context) error
}

type readinessCheck struct {
	name  string
	check func(ctx context.Context) error
}

// built is a serving process before it listens: its router with every
// role's routes, its workers, and what to close when it stops (pools, the
// embedded PostgreSQL, the event store's client, tracing).
type built struct {
	a         *app
	handler   http.Handler // the router, with request IDs, request logs, panic recovery and tracing
	embedded  *pgembed.Server
	devSecret bool
	secret    []byte
	closers   []func()
}

// close closes what build opened, last first.
func (b *built) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

// build wires a serving process with roles: everything serve does before
// it listens. On an error it closes what it opened.
func build(ctx context.Context, e env, roles roleSet, logger *slog.Logger, stdout io.Writer) (_ *built, err error) {
	b := &built{}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	mods := e.mods
	registry, err := mods.Registry()
	if err != nil {
		return nil, err
	}
	if err := mods.CheckProjections(); err != nil {
		return nil, err
	}
	apiDoc, err := openapi.Document(mods)
	if err != nil {
		return nil, err
	}
	autoMigrate, err := e.boolean("STRATA_AUTO_MIGRATE", true)
	if err != nil {
		return nil, err
	}
	maxConns, err := e.integer("STRATA_DB_MAX_CONNS", 8)
	if err != nil {
		return nil, err
	}
	id, err := e.bearerTokens(logger)
	if err != nil {
		return nil, err
	}
	verifier, secret, devSecret := id.verifier, id.secret, id.dev

	shutdownTracing, tracing, err := telemetry.SetupTracing(ctx, e.get, "strata", stdout)
	if err != nil {
		return nil, err
	}
	if testSpanExporter != nil {
		shutdownTracing, tracing = telemetry.Install(testSpanExporter, "strata"), true
	}
	b.closers = append(b.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flush traces", "error", err.Error())
		}
	})
	var pgTracer pgx.QueryTracer
	if tracing {
		pgTracer = telemetry.PgxTracer{}
	}

	conns, err := e.databases(ctx, logger)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, conns.stop)
	if err := autoMigrateServe(ctx, e, autoMigrate, conns, logger, mods.Lines()); err != nil {
		return nil, err
	}
	pools, err := openServing(ctx, e, conns, roles[roleQuery], db.PoolConfig{MaxConns: int32(maxConns), Tracer: pgTracer}, logger)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, pools.close)
	appPool, projPool, embedded := pools.app, pools.proj, conns.embedded
	// Personal data is sealed and opened with the keys of the database the
	// tenant is placed in: the pool's here, each placement's in its app.
	if registry, err = protect(ctx, e, registry, appPool); err != nil {
		return nil, err
	}

	a := &app{
		mods:     mods,
		registry: registry,
		logger:   logger,
		url:      conns.owner,
		appPool:  appPool,
		projPool: projPool,
		pools:    pools,
		verifier: verifier,
		router:   httpapi.NewRouter(),
		appended: newBroadcast(),
		env:      e,
		metrics:  telemetry.NewMetrics(),
		tracing:  tracing,
	}
	a.metrics.RegisterPool("app", appPool)
	a.metrics.RegisterPool("projector", projPool)
	listenKeys(a, appPool)
	groupCommit, err := e.groupCommit()
	if err != nil {
		return nil, err
	}
	a.groupCommit = groupCommit
	a.store = postgres.New(appPool, projPool, append(groupCommit, postgres.WithAppendHook(a.appended.fire))...)
	a.events, a.log = a.store, a.store
	if es := e.str("STRATA_EVENT_STORE", "postgres"); es != "postgres" {
		if !strings.HasPrefix(es, "esdb://") && !strings.HasPrefix(es, "esdb+discover://") {
			return nil, fmt.Errorf("STRATA_EVENT_STORE: want postgres or an esdb:// URL")
		}
		opts := []esdb.Option{esdb.WithIdempotencyStore(a.store), esdb.WithLogger(logger)}
		if ns := e.str("STRATA_ESDB_NAMESPACE", ""); ns != "" {
			opts = append(opts, esdb.WithNamespace(ns))
		}
		es, err := esdb.Open(ctx, es, opts...)
		if err != nil {
			return nil, fmt.Errorf("STRATA_EVENT_STORE: %w", err)
		}
		b.closers = append(b.closers, func() { es.Close() })
		a.events, a.log, a.external = notifying{es, a.appended.fire}, es, true
		a.readiness = append(a.readiness, readinessCheck{"eventstore", es.Ping})
		logger.Info("event store: EventStoreDB", "url", esdb.Redact(e.str("STRATA_EVENT_STORE", "")))
	}
	a.router.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet).Name("livez")
	a.readiness = append(a.readiness, readinessCheck{"database", func(ctx context.Context) error { return schemaCurrent(ctx, appPool, mods) }},
		readinessCheck{"database_logins", pools.checkLogins})
	id.watch(ctx, a)
	a.router.HandleFunc("/readyz", a.readyz).Methods(http.MethodGet).Name("readyz")
	mountOpenAPI(a.router, apiDoc)
	mountConsole(a.router)
	a.router.Use(httpapi.TagRoute, a.metrics.HTTPMiddleware)
	if tracing {
		a.router.Use(telemetry.NameSpanByRoute)
	}
	a.api = a.router.NewRoute().Subrouter()
	a.api.Use(httpapi.Authenticate(verifier))
	tenants, err := wireTenancy(ctx, a, roles, devSecret)
	if err != nil {
		return nil, err
	}
	limiter, err := newRateLimiter(e, a.metrics, tenants.rates)
	if err != nil {
		return nil, err
	}
	slots, err := newTenantLimiter(e, a.metrics, tenants.slots)
	if err != nil {
		return nil, err
	}
	bodyTimeout, err := e.duration("STRATA_BODY_TIMEOUT", httpapi.DefaultBodyTimeout)
	if err != nil {
		return nil, err
	}
	maxInFlight, err := e.integer("STRATA_MAX_IN_FLIGHT", httpapi.DefaultMaxInFlight)
	if err != nil {
		return nil, err
	}
	capper, err := httpapi.NewInFlightCap(httpapi.InFlightConfig{Max: maxInFlight, ShedFunc: func(*http.Request) { a.metrics.LoadShed.Inc() }})
	if err != nil {
		return nil, err
	}
	// The shared cap is taken last: after authentication, the tenant's
	// rate and its own slot, and once the body has arrived, so that neither
	// unauthenticated nor slow requests (nor one tenant's many) hold it.
	// The tenant's share of the pool comes just before it, so that a
	// request waiting for its tenant's share holds no shared slot either.
	a.commandAPI = a.api.NewRoute().Subrouter()
	share, err := newPoolShare(e, maxConns, a.metrics)
	if err != nil {
		return nil, err
	}
	a.commandChain = []mux.MiddlewareFunc{tenants.gate, tenants.requests("commands"), limiter.Middleware(httpapi.RateCommands), slots.Middleware(httpapi.SlotCommands), httpapi.BufferBody(bodyTimeout), share.Middleware, capper.Middleware}
	a.queryAPI = a.api.NewRoute().Subrouter()
	a.queryChain = []mux.MiddlewareFunc{tenants.gate, tenants.requests("queries"), limiter.Middleware(httpapi.RateQueries), slots.Middleware(httpapi.SlotQueries), httpapi.BufferBody(bodyTimeout), share.Middleware, capper.Middleware}
	a.waitSlot = func(r *http.Request) (func(), error) {
		release, err := slots.Enter(r, httpapi.SlotWaits)
		if err != nil {
			return nil, err
		}
		resume := httpapi.YieldPoolShare(r.Context()) // a wait holds no connection
		start := time.Now()
		return func() { tenants.waited(r, time.Since(start)); resume(); release() }, nil
	}
	// Every placement's app is wired with the chains above; the pool's
	// routes send a placed tenant's requests to it first.
	placed, err := wirePlacements(ctx, a, conns, roles, db.PoolConfig{MaxConns: int32(maxConns), Tracer: pgTracer}, autoMigrate, tenants.dir)
	if err != nil {
		return nil, err
	}
	a.commandAPI.Use(append([]mux.MiddlewareFunc{placed.route}, a.commandChain...)...)
	a.queryAPI.Use(append([]mux.MiddlewareFunc{placed.route}, a.queryChain...)...)

	for _, w := range []struct {
		role string
		wire func(*app) error
	}{{roleCommand, wireCommand}, {roleCommand, wireNotifier}, {roleQuery, wireQuery}, {roleQuery, wireAdmin}, {roleProjector, wireProjector}, {roleProjector, wireProcesses}, {roleProjector, wireRelay}, {roleProjector, wireRetention}} {
		if roles[w.role] {
			if err := w.wire(a); err != nil {
				return nil, fmt.Errorf("start %s role: %w", w.role, err)
			}
		}
	}

	// Every route of the document answers alike on every process: a path
	// whose role this process does not run is a 405 (with the methods it
	// does serve there, possibly none), never a 404 on one route and a 405
	// on another.
	apiPaths, err := documentedPaths(apiDoc)
	if err != nil {
		return nil, err
	}
	httpapi.SetMisses(a.router, apiPaths)

	var handler http.Handler = httpapi.WithRequestID(httpapi.LogRequests(logger)(httpapi.Recover(a.router)))
	if tracing {
		handler = otelhttp.NewHandler(handler, "http.server")
	}
	b.a, b.handler, b.embedded, b.devSecret, b.secret = a, handler, embedded, devSecret, secret
	return b, nil
}

// serve runs a serving process on addr until ctx ends or a component
// fails: build, listen, run the workers, shut down within shutdownTimeout.
func serve(ctx context.Context, e env, addr string, roles roleSet, logger *slog.Logger, stdout io.Writer) error {
	tlsCfg, err := e.tlsSettings(logger)
	if err != nil {
		return err
	}
	b, err := build(ctx, e, roles, logger, stdout)
	if err != nil {
		return err
	}
	defer b.close()
	a := b.a
	if pprofAddr := e.str("STRATA_PPROF_ADDR", ""); pprofAddr != "" {
		// Profiling on a separate listener, never on the API's port.
		pm := http.NewServeMux()
		pm.HandleFunc("/debug/pprof/", pprof.Index)
		pm.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pm.HandleFunc("/debug/pprof/trace", pprof.Trace)
		pm.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		psrv := httpapi.NewServer(pprofAddr, pm)
		psrv.WriteTimeout = 2 * time.Minute
		pln, err := listen(pprofAddr, tlsCfg.ops)
		if err != nil {
			return fmt.Errorf("listen on STRATA_PPROF_ADDR %s: %w", pprofAddr, err)
		}
		go psrv.Serve(pln) //nolint:errcheck
		defer psrv.Close()
		logger.Info("pprof listening", "url", scheme(tlsCfg.ops)+displayAddr(pln.Addr())+"/debug/pprof/")
	}
	var metricsURL string
	if metricsAddr := e.str("STRATA_METRICS_ADDR", ""); metricsAddr != "" {
		murl, stopMetrics, err := serveMetrics(metricsAddr, tlsCfg.ops, a.metrics.Handler(), logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
		metricsURL = murl
	}
	srv := httpapi.NewServer(addr, b.handler)
	ln, err := listen(addr, tlsCfg.api)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	baseURL := scheme(tlsCfg.api) + displayAddr(ln.Addr())
	if testRouterHook != nil {
		testRouterHook(baseURL, a.router)
	}

	failed := make(chan error, 1)
	go func() {
		if err := srv.Serve(httpapi.ServerAnswers(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed <- err
		}
	}()
	logger.Info("serving", "url", baseURL, "roles", roles.String())
	printBanner(stdout, baseURL, metricsURL, roles, b.embedded, b.devSecret, b.secret)
	return a.runWorkers(ctx, failed, srv.Shutdown)
}

// runWorkers runs the app's workers until ctx ends or one of them (or
// failed, the listener's) fails, then stops: shutdown (the HTTP server's,
// or nil) first, then the workers, all within shutdownTimeout.
func (a *app) runWorkers(ctx context.Context, failed <-chan error, shutdown func(context.Context) error) error {
	logger := a.logger
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var wg sync.WaitGroup
	werr := make(chan error, len(a.workers))
	for _, w := range a.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(wctx); err != nil && wctx.Err() == nil {
				werr <- fmt.Errorf("%s: %w", w.name, err)
			}
		}()
	}
	var failure error
	select {
	case failure = <-werr:
		logger.Error("a component failed; shutting down", "error", failure.Error())
	case failure = <-failed:
		logger.Error("a component failed; shutting down", "error", failure.Error())
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if shutdown != nil {
		if err := shutdown(sctx); err != nil {
			failure = errors.Join(failure, fmt.Errorf("shutdown: %w", err))
		}
	}
	stopWorkers()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-sctx.Done():
		failure = errors.Join(failure, errors.New("background work did not stop within the shutdown timeout"))
	}
	logger.Info("stopped")
	return failure
}

// wireCommand mounts every module's command routes, each aggregate type's
// handler sharing the store, the idempotency records, the registry and the
// telemetry middleware.
func wireCommand(a *app) error {
	// Ready only while a command's commit would succeed: reads alone pass
	// on a primary orphaned by a failover, or one just promoted whose
	// synchronous standby has not connected, where every commit waits
	// (docs/operations.md, "Failover").
	probe := &writeProbe{pool: a.appPool, sem: make(chan struct{}, 1)}
	a.readiness = append(a.readiness, readinessCheck{"database_writes", probe.check})
	return a.mods.MountCommands(a.commandAPI, commandapi.Deps{
		Store:       telemetry.InstrumentStore(a.events, a.metrics),
		Idempotency: a.store,
		Config:      commands.Config{Registry: a.registry, Middleware: []commands.Middleware{telemetry.CommandMiddleware(a.metrics)}},
		Placement:   a.placement,
		Epoch:       a.epoch,
	}, a.env.get)
}

// writeProbe is /readyz's database_writes check. /readyz is not
// authenticated and every barrier costs a transaction ID: it commits one
// barrier at a time and answers from a success of the last writeProbeFresh
// (a failure is never reused, so recovery shows at once).
type writeProbe struct {
	pool *pgxpool.Pool
	sem  chan struct{}
	mu   sync.Mutex
	okAt time.Time
}

const writeProbeFresh = 500 * time.Millisecond

func (p *writeProbe) fresh() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.okAt) < writeProbeFresh
}

func (p *writeProbe) check(ctx context.Context) error {
	if p.fresh() {
		return nil
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return errNoCommitInTime
	}
	defer func() { <-p.sem }()
	if p.fresh() { // another /readyz committed one meanwhile
		return nil
	}
	err := writesReady(ctx, p.pool)
	if err == nil {
		p.mu.Lock()
		p.okAt = time.Now()
		p.mu.Unlock()
	}
	return err
}

var errNoCommitInTime = errors.New("a commit did not complete in time: no primary accepts writes, or its synchronous standby does not answer")

// writesReady commits an empty write transaction on pool (db.CommitBarrier)
// and says why it could not.
func writesReady(ctx context.Context, pool *pgxpool.Pool) error {
	err := db.CommitBarrier(ctx, pool)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errNoCommitInTime
	case db.IsUnavailable(err):
		return errors.New("unreachable")
	case db.SQLState(err) == "25006" || strings.Contains(err.Error(), "during recovery"):
		return errors.New("read-only: the database is a standby")
	default:
		return err
	}
}

// schemaCurrent reports whether every migration line (the engine's and
// each module's) is at the version this binary expects.
func schemaCurrent(ctx context.Context, pool *pgxpool.Pool, mods module.Set) error {
	err := db.Check(ctx, pool, mods.Lines()...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, db.ErrSchemaBehind):
		return fmt.Errorf("%v: run `strata migrate up`", err)
	case db.IsUnavailable(err):
		return errors.New("unreachable")
	default:
		return err
	}
}

// readyz reports whether this process can serve: every check of its roles
// passes (the database answers with the expected schema, projections are
// running, ...).
func (a *app) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	for _, c := range a.readiness {
		if err := c.check(ctx); err != nil {
			checks[c.name] = err.Error()
			ok = false
		} else {
			checks[c.name] = "ok"
		}
	}
	body := map[string]any{"status": "ok", "checks": checks, "warnings": append([]string(nil), a.pools.warnings...)}
	for _, add := range a.readyInfo {
		add(body)
	}
	if len(body["warnings"].([]string)) == 0 {
		delete(body, "warnings")
	}
	if !ok {
		w.Header().Set("Retry-After", "2")
		body["status"] = "unavailable"
		httpapi.WriteJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}

// displayAddr turns ":8080" / "[::]:8080" into something a curl line can use.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// devTenant is the tenant of the token printed at startup.
const devTenant = "demo"

func printBanner(w io.Writer, baseURL, metricsURL string, roles roleSet, embedded *pgembed.Server, devSecret bool, secret []byte) {
	fmt.Fprintf(w, "strata is serving on %s (roles: %s)\n", baseURL, roles)
	if metricsURL != "" {
		fmt.Fprintf(w, "metrics: %s (STRATA_METRICS_ADDR)\n", metricsURL)
	}
	if embedded != nil {
		fmt.Fprintf(w, "database: embedded PostgreSQL (data in %s; `make db/reset` deletes it)\n", embedded.DataDir())
	}
	if secret == nil {
		fmt.Fprintln(w, "tokens: the identity provider's (STRATA_OIDC_ISSUER); /readyz says whether its keys were fetched")
		return
	}
	if !devSecret {
		fmt.Fprintln(w, "tokens: signed with STRATA_JWT_SECRET; make one with `strata token --tenant T`")
		return
	}
	token, err := auth.Sign(secret, auth.Claims{Subject: "dev", Tenant: devTenant, Scopes: []string{auth.ScopeAdmin}}, 24*time.Hour)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "development token (tenant %q, admin scope, valid 24h):\n  %s\n", devTenant, token)
	fmt.Fprintf(w, "try:\n  curl -s -X POST %s/v1/orders -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"customer_id\":\"c-1\",\"currency\":\"EUR\"}'\n", baseURL, token)
}

// notifying fires fn after every successful append of an adapter that has
// no append hook of its own, so local projection runners wake at once.
type notifying struct {
	eventstore.Store
	fn func()
}

func (n notifying) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	res, err := n.Store.Append(ctx, req)
	if err == nil {
		n.fn()
	}
	return res, err
}

// newRateLimiter builds the per-tenant limits from STRATA_RATE_COMMANDS,
// STRATA_RATE_QUERIES and STRATA_RATE_OVERRIDES; the tenant directory's
// quotas (tenant) win over the overrides.
func newRateLimiter(e env, m *telemetry.Metrics, tenant func(domain.TenantID) httpapi.TenantRates) (*httpapi.RateLimiter, error) {
	cfg := httpapi.RateLimitConfig{TenantFunc: tenant, RejectFunc: func(_ *http.Request, class httpapi.RateClass) {
		m.RateLimited.WithLabelValues(string(class)).Inc()
	}}
	for _, class := range []httpapi.RateClass{httpapi.RateCommands, httpapi.RateQueries} {
		m.RateLimited.WithLabelValues(string(class)) // exported from zero, not from the first rejection
	}
	var err error
	if v := e.str("STRATA_RATE_COMMANDS", ""); v != "" {
		if cfg.Commands, err = httpapi.ParseRate(v); err != nil {
			return nil, fmt.Errorf("STRATA_RATE_COMMANDS: %w", err)
		}
	}
	if v := e.str("STRATA_RATE_QUERIES", ""); v != "" {
		if cfg.Queries, err = httpapi.ParseRate(v); err != nil {
			return nil, fmt.Errorf("STRATA_RATE_QUERIES: %w", err)
		}
	}
	if v := e.str("STRATA_RATE_OVERRIDES", ""); v != "" {
		if cfg.Overrides, err = httpapi.ParseRateOverrides(v); err != nil {
			return nil, fmt.Errorf("STRATA_RATE_OVERRIDES: %w", err)
		}
	}
	return httpapi.NewRateLimiter(cfg)
}

// newTenantLimiter builds the per-tenant in-flight limits from
// STRATA_TENANT_IN_FLIGHT_COMMANDS, _QUERIES, _WAITS and _OVERRIDES; the
// tenant directory's quotas (tenant) win over the overrides.
func newTenantLimiter(e env, m *telemetry.Metrics, tenant func(domain.TenantID) httpapi.TenantSlots) (*httpapi.TenantLimiter, error) {
	cfg := httpapi.TenantLimitConfig{TenantFunc: tenant, RejectFunc: func(_ *http.Request, class httpapi.SlotClass) {
		m.TenantInFlight.WithLabelValues(string(class)).Inc()
	}}
	for _, c := range []struct {
		name  string
		class httpapi.SlotClass
		dst   *int
	}{{"STRATA_TENANT_IN_FLIGHT_COMMANDS", httpapi.SlotCommands, &cfg.Commands},
		{"STRATA_TENANT_IN_FLIGHT_QUERIES", httpapi.SlotQueries, &cfg.Queries},
		{"STRATA_TENANT_IN_FLIGHT_WAITS", httpapi.SlotWaits, &cfg.Waits}} {
		m.TenantInFlight.WithLabelValues(string(c.class)) // exported from zero
		if v := e.str(c.name, ""); v != "" {
			n, err := httpapi.ParseSlots(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			*c.dst = n
		}
	}
	if v := e.str("STRATA_TENANT_IN_FLIGHT_OVERRIDES", ""); v != "" {
		var err error
		if cfg.Overrides, err = httpapi.ParseSlotOverrides(v); err != nil {
			return nil, fmt.Errorf("STRATA_TENANT_IN_FLIGHT_OVERRIDES: %w", err)
		}
	}
	return httpapi.NewTenantLimiter(cfg)
}
