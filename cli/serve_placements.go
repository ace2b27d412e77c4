package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy"
)

// placementSet is what a serve process serves of the placements other than
// its own database (ARCHITECTURE decision 14, docs/scaling.md): one app
// per placement, with the placement's own pools, store, runners and
// routes, built by the same wire functions as the pool's. The command and
// query routes of the pool's app look up the token's tenant in the
// directory first (route) and hand a placed tenant's request to its
// placement's router, which runs the same middleware chain (gate, rates,
// slots, body, pool share, in-flight cap).
type placementSet struct {
	parent      *app
	dir         *tenancy.Directory // nil: no routing (a projector-only process)
	roles       roleSet
	base        db.PoolConfig
	autoMigrate bool
	registry    *placement.Registry // nil without an owner connection
	owner       *pgxpool.Pool
	moves       *telemetry.MoveMetrics // the unfinished tenant moves, read at every reload
	reload      time.Duration
	logger      *slog.Logger

	apps     atomic.Pointer[map[string]*app] // placement -> its app, replaced on every attach
	mu       sync.Mutex
	problems map[string]string // placement -> why it is not served (yet)
	behind   map[string]bool   // placements not served because their schema is behind this binary
	initial  []*app            // attached while wiring: run goes on to run their workers
}

// wirePlacements lists the registry on the owner connection and builds
// the app of every active placement; the "placements" worker runs their
// workers and attaches placements added later (STRATA_PLACEMENT_RELOAD).
func wirePlacements(ctx context.Context, a *app, conns dbConns, roles roleSet, base db.PoolConfig, autoMigrate bool, dir *tenancy.Directory) (*placementSet, error) {
	reload, err := a.env.duration("STRATA_PLACEMENT_RELOAD", 10*time.Second)
	if err != nil {
		return nil, err
	}
	ps := &placementSet{parent: a, dir: dir, roles: roles, base: base, autoMigrate: autoMigrate, reload: reload,
		logger: a.logger, problems: map[string]string{}, behind: map[string]bool{}}
	empty := map[string]*app{}
	ps.apps.Store(&empty)
	if conns.owner == "" {
		a.logger.Info("no owner connection (DATABASE_URL is unset): tenants placed outside this database are refused (503)")
		return ps, nil
	}
	ps.owner, err = db.OpenPool(ctx, conns.owner, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2, AppName: "strata-placements"})
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	ps.registry = placement.NewRegistry(ps.owner)
	ps.moves = a.metrics.EnableMoves()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ps.initial = ps.attach(lctx)
	ps.refreshMoves(lctx)
	cancel()
	a.workers = append(a.workers, worker{name: "placements", run: ps.run})
	a.readiness = append(a.readiness, readinessCheck{"placements", ps.ready})
	a.readyInfo = append(a.readyInfo, ps.info)
	return ps, nil
}

// attach builds the app of every active placement not served yet. A
// placement that cannot be reached or refuses its logins is recorded as a
// problem and tried again at the next reload; its tenants meet 503 until
// then. It returns the apps it attached, whose workers are to run.
func (ps *placementSet) attach(ctx context.Context) (attached []*app) {
	list, err := ps.registry.List(ctx)
	if err != nil {
		ps.setProblem("(registry)", "cannot read the placements: "+pgMessage(err))
		return nil
	}
	ps.setProblem("(registry)", "")
	current := *ps.apps.Load()
	for _, p := range list {
		if p.Name == placement.Pool || p.Status != placement.StatusActive {
			continue
		}
		if _, ok := current[p.Name]; ok {
			continue
		}
		if ps.parent.external {
			ps.setProblem(p.Name, "placements need the PostgreSQL event store; this process's events are in EventStoreDB")
			continue
		}
		child, err := ps.build(ctx, p)
		ps.mu.Lock()
		ps.behind[p.Name] = errors.Is(err, db.ErrSchemaBehind)
		ps.mu.Unlock()
		if err != nil {
			ps.logger.Warn("placement not served yet", "placement", p.Name, "error", err.Error())
			ps.setProblem(p.Name, err.Error())
			continue
		}
		ps.setProblem(p.Name, "")
		next := make(map[string]*app, len(current)+1)
		for k, v := range current {
			next[k] = v
		}
		next[p.Name] = child
		ps.apps.Store(&next)
		current = next
		attached = append(attached, child)
		ps.logger.Info("placement served", "placement", p.Name, "database", p.Redacted())
	}
	return attached
}

// attachTimeout is the least time one reload gives to attaching the
// placements added since the last and refreshing the moves.
const attachTimeout = 10 * time.Second

func (ps *placementSet) setProblem(name, why string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if why == "" {
		delete(ps.problems, name)
	} else {
		ps.problems[name] = why
	}
}

// build makes the app of one placement: its database migrated (as the
// pool's, when STRATA_AUTO_MIGRATE allows), its serving pools opened and
// checked as the pool's are, and every role of this process wired on it
// (its retention job reads the tenants placed there, and their settings,
// from the directory of the control plane).
func (ps *placementSet) build(ctx context.Context, p placement.Placement) (*app, error) {
	a := ps.parent
	logger := a.logger.With("placement", p.Name)
	c, err := placementConns(p.URL)
	if err != nil {
		return nil, err
	}
	if err := autoMigrateServe(ctx, a.env, ps.autoMigrate, c, logger, a.mods.Lines()); err != nil {
		return nil, err
	}
	pools, err := openServing(ctx, a.env, c, ps.roles[roleQuery], ps.base, logger)
	if err != nil {
		return nil, err
	}
	// A placement whose schema is behind this binary (migrations pending
	// after an upgrade, with STRATA_AUTO_MIGRATE off or a failed migration)
	// is not served: its tenants meet a 503 that says so (route) until
	// `strata migrate up` has migrated it and the next reload attaches it.
	if err := db.Check(ctx, pools.app, a.mods.Lines()...); err != nil {
		pools.close()
		if errors.Is(err, db.ErrSchemaBehind) {
			return nil, fmt.Errorf("%w: run `strata migrate up`", err)
		}
		return nil, fmt.Errorf("read the schema's version: %w", err)
	}
	registry, err := protect(ctx, a.env, a.registry, pools.app)
	if err != nil {
		pools.close()
		return nil, err
	}
	child := &app{
		mods:      a.mods,
		registry:  registry,
		logger:    logger,
		url:       p.URL,
		appPool:   pools.app,
		projPool:  pools.proj,
		pools:     pools,
		verifier:  a.verifier,
		router:    httpapi.NewRouter(), // as the pool's: escaped paths, variables decoded once (httpapi.PathVar)
		appended:  newBroadcast(),
		env:       a.env,
		metrics:   a.metrics.ForPlacement(p.Name),
		tracing:   a.tracing,
		placement: p.Name,
		directory: a.projPool,
		epoch:     p.Epoch,
		waitSlot:  a.waitSlot,
	}
	listenKeys(child, pools.app)
	child.metrics.RegisterPool("app", pools.app)
	child.metrics.RegisterPool("projector", pools.proj)
	child.store = postgres.New(pools.app, pools.proj, append(append([]postgres.Option(nil), a.groupCommit...), postgres.WithAppendHook(child.appended.fire))...)
	child.events, child.log = child.store, child.store
	child.readiness = append(child.readiness,
		readinessCheck{"database", func(ctx context.Context) error { return schemaCurrent(ctx, pools.app, a.mods) }},
		readinessCheck{"database_logins", pools.checkLogins})
	child.router.Use(httpapi.TagRoute)
	child.api = child.router.NewRoute().Subrouter()
	child.commandAPI = child.api.NewRoute().Subrouter()
	child.commandAPI.Use(a.commandChain...)
	child.queryAPI = child.api.NewRoute().Subrouter()
	child.queryAPI.Use(a.queryChain...)
	for _, w := range []struct {
		role string
		wire func(*app) error
	}{{roleCommand, wireCommand}, {roleCommand, wireNotifier}, {roleQuery, wireQuery}, {roleQuery, wireAdmin}, {roleProjector, wireProjector}, {roleProjector, wireProcesses}, {roleProjector, wireRelay}, {roleProjector, wireRetention}} {
		if ps.roles[w.role] {
			if err := w.wire(child); err != nil {
				pools.close()
				return nil, fmt.Errorf("start %s role: %w", w.role, err)
			}
		}
	}
	return child, nil
}

// run runs the workers of every attached placement, attaches the ones
// added later, and on shutdown waits for the workers and closes the
// placements' pools.
func (ps *placementSet) run(ctx context.Context) error {
	var wg sync.WaitGroup
	var children []*app
	failed := make(chan error, 1)
	start := func(child *app) {
		children = append(children, child)
		for _, w := range child.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.run(ctx); err != nil && ctx.Err() == nil {
					select {
					case failed <- fmt.Errorf("placement %s: %s: %w", child.placement, w.name, err):
					default:
					}
				}
			}()
		}
	}
	for _, child := range ps.initial {
		start(child)
	}
	t := time.NewTicker(ps.reload)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case <-t.C:
			// An attach opens pools and reads a schema's version; a short
			// reload interval must not starve it (a placement would be
			// reported unreachable when it was only slow to answer).
			actx, cancel := context.WithTimeout(ctx, max(ps.reload, attachTimeout))
			for _, child := range ps.attach(actx) {
				start(child)
			}
			ps.refreshMoves(actx)
			cancel()
		case err = <-failed:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	wg.Wait()
	for _, c := range children {
		c.pools.close()
	}
	if ps.owner != nil {
		ps.owner.Close()
	}
	return err
}

// refreshMoves exports the unfinished tenant moves' phase and progress
// (the move runs in a `strata tenants move` process, too short-lived to be
// scraped). A failure to read keeps the last values and is logged.
func (ps *placementSet) refreshMoves(ctx context.Context) {
	list, err := placement.NewMover(placement.MoverConfig{Control: ps.owner}).Moves(ctx, "")
	if err != nil {
		ps.logger.Warn("read the tenant moves for their metrics", "error", err)
		return
	}
	var open []telemetry.MoveSample
	for _, mv := range list {
		switch mv.Phase {
		case placement.PhaseCopying, placement.PhaseFrozen, placement.PhaseSwitched:
		default:
			continue
		}
		freeze := -1.0
		if mv.FreezeMS != nil {
			freeze = *mv.FreezeMS / 1000
		}
		open = append(open, telemetry.MoveSample{Tenant: string(mv.Tenant), Source: mv.Source, Target: mv.Target, Phase: mv.Phase,
			Copied: mv.CopiedEvents, Remaining: mv.Remaining, FreezeSeconds: freeze})
	}
	ps.moves.Set(open)
}

// ready is the readiness of every placement this process serves: each
// one's checks, and none that is registered but not served.
func (ps *placementSet) ready(ctx context.Context) error {
	var problems []string
	ps.mu.Lock()
	for name, why := range ps.problems {
		problems = append(problems, "placement "+name+": "+why)
	}
	ps.mu.Unlock()
	apps := *ps.apps.Load()
	for _, name := range sortedKeys(apps) {
		for _, c := range apps[name].readiness {
			if err := c.check(ctx); err != nil {
				problems = append(problems, fmt.Sprintf("placement %s: %s: %v", name, c.name, err))
			}
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// info adds the placements served to /readyz's body.
func (ps *placementSet) info(body map[string]any) {
	body["placements"] = append([]string{placement.Pool}, sortedKeys(*ps.apps.Load())...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// route sends a request whose tenant is placed outside this database to
// its placement's router; every other request goes on here.
func (ps *placementSet) route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := ps.placementOf(r)
		if name == placement.Pool {
			next.ServeHTTP(w, r)
			return
		}
		child, ok := (*ps.apps.Load())[name]
		if !ok {
			msg := "the tenant's placement " + name + " is not served by this process yet; try again shortly"
			ps.mu.Lock()
			if ps.behind[name] {
				msg = "the tenant's placement " + name + " has an older schema than this strata (migrations pending): it is served once an operator runs `strata migrate up`"
			}
			ps.mu.Unlock()
			httpapi.WriteError(w, r, &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, RetryAfter: 5 * time.Second,
				Message: msg})
			return
		}
		child.router.ServeHTTP(w, r)
	})
}

// placementOf is the placement of the request's tenant in this process's
// copy of the directory: pool for a tenant it does not know (the gate
// decides whether such a tenant is served at all).
func (ps *placementSet) placementOf(r *http.Request) string {
	if ps.dir == nil {
		return placement.Pool
	}
	claims, ok := httpapi.ClaimsFrom(r.Context())
	if !ok {
		return placement.Pool
	}
	e, ok := ps.dir.Lookup(claims.Tenant)
	if !ok || e.Placement == "" {
		return placement.Pool
	}
	return e.Placement
}
