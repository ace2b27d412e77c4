package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/module"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/projections"
)

const placementsUsage = `strata placements — the databases tenants are placed in (docs/scaling.md, "Placements"); needs the owner connection (DATABASE_URL)

Usage:
  strata placements add NAME --url URL [--note "..."] [--json]   migrate the database at URL (the owner's URL there) and register it
  strata placements list [--json]                                every placement, its status and tenants
  strata placements status [NAME] [--json]                       per placement: reachable, schema, log head, projections

This database is always the placement "pool". A tenant is placed with
` + "`strata tenants provision T --placement NAME`" + `; serving processes route its
commands, queries and admin calls there and run every runner per placement.
`

func cmdPlacements(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, placementsUsage)
		return exitUsage
	}
	sub := args[0]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, placementsUsage)
		return exitOK
	}
	fs := flag.NewFlagSet("placements "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	rawURL := fs.String("url", "", "add: the owner's URL of the placement's database")
	note := fs.String("note", "", "add: what the placement is for (shown by list)")
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return exitUsage
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return placementsUsageError(stderr, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	switch sub {
	case "add":
		if name == "" || *rawURL == "" {
			return placementsUsageError(stderr, "placements add needs NAME and --url")
		}
	case "list":
	case "status":
	default:
		return placementsUsageError(stderr, fmt.Sprintf("unknown subcommand %q", sub))
	}
	_, owner, closeOwner, err := openTenantStorePool(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata placements:", err)
		return exitFailure
	}
	defer closeOwner()
	reg := placement.NewRegistry(owner)
	switch sub {
	case "add":
		err = addPlacement(ctx, e, reg, owner, name, *rawURL, *note, *asJSON, stdout)
	case "list":
		err = listPlacements(ctx, reg, *asJSON, stdout)
	case "status":
		err = placementsStatus(ctx, e, reg, name, *asJSON, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "strata placements:", err)
		return exitFailure
	}
	return exitOK
}

func placementsUsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "strata placements: %s\n\n%s", msg, placementsUsage)
	return exitUsage
}

// addPlacement migrates the placement's database (every module's line),
// provisions the serving logins there, and registers it. A database that
// is the control plane's own is refused: it is the placement pool.
func addPlacement(ctx context.Context, e env, reg *placement.Registry, owner *pgxpool.Pool, name, rawURL, note string, asJSON bool, stdout io.Writer) error {
	if err := placement.ValidName(name); err != nil {
		return err
	}
	same, err := sameDatabase(ctx, owner, rawURL)
	if err != nil {
		return fmt.Errorf("placement %s: cannot reach %s: %v", name, placement.Redact(rawURL), pgMessage(err))
	}
	if same {
		return fmt.Errorf("placement %s: %s is this database, the placement %q", name, placement.Redact(rawURL), placement.Pool)
	}
	logf := func(format string, args ...any) {
		if !asJSON {
			fmt.Fprintf(stdout, format+"\n", args...)
		}
	}
	if err := migratePlacement(ctx, e, rawURL, logf); err != nil {
		return fmt.Errorf("placement %s: %w", name, err)
	}
	p, created, err := reg.Add(ctx, name, rawURL, note)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"placement": placementView(p, 0), "created": created})
	}
	if created {
		fmt.Fprintf(stdout, "placement %s added: %s\n", p.Name, p.Redacted())
	} else {
		fmt.Fprintf(stdout, "placement %s was already registered with this URL: migrations checked\n", p.Name)
	}
	return nil
}

// migratePlacement applies every module's migrations to a placement's
// database and provisions the serving logins strata derives from its URL.
func migratePlacement(ctx context.Context, e env, rawURL string, logf db.Logf) error {
	if err := db.Up(ctx, rawURL, logf, e.mods.Lines()...); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	c, err := placementConns(rawURL)
	if err != nil {
		return err
	}
	logins, err := markPooled(e, []db.Login{{Role: c.app.role, URL: c.app.url}, {Role: c.proj.role, URL: c.proj.url}})
	if err != nil {
		return err
	}
	return db.EnsureLogins(ctx, rawURL, logins, logf)
}

// placementConns are the connections of a placement: its owner URL and
// the serving logins derived from it, as from DATABASE_URL when
// STRATA_APP_DATABASE_URL and STRATA_PROJECTOR_DATABASE_URL are unset.
func placementConns(ownerURL string) (dbConns, error) {
	c := dbConns{owner: ownerURL, stop: func() {}}
	var err error
	if c.app, err = loginFor(db.RoleApp, "", "STRATA_APP_DATABASE_URL", db.LoginApp, ownerURL); err != nil {
		return c, err
	}
	c.proj, err = loginFor(db.RoleProjector, "", "STRATA_PROJECTOR_DATABASE_URL", db.LoginProjector, ownerURL)
	return c, err
}

// sameDatabase reports whether rawURL reaches the database owner is
// connected to (same cluster and database).
func sameDatabase(ctx context.Context, owner *pgxpool.Pool, rawURL string) (bool, error) {
	here, err := databaseIdentity(ctx, owner)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, rawURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	there, err := databaseIdentity(cctx, conn)
	return here == there, err
}

// databaseIdentity names a database: its name and its cluster's system
// identifier, or, where reading pg_control_system is not allowed, the
// server's address and port as the session sees them.
func databaseIdentity(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT current_database() || '@' || system_identifier::text FROM pg_control_system()`).Scan(&id)
	if db.SQLState(err) == "42501" { // insufficient_privilege
		err = q.QueryRow(ctx, `SELECT current_database() || '@' || coalesce(host(inet_server_addr()), 'socket') || ':' || coalesce(inet_server_port(), 0)`).Scan(&id)
	}
	return id, err
}

// discardLog is the logger of a command's own connections: its output is
// the command's.
var discardLog = slog.New(slog.DiscardHandler)

type placementJSON struct {
	placement.Placement
	URL     string `json:"url"`
	Tenants int    `json:"tenants"`
}

func placementView(p placement.Placement, tenants int) placementJSON {
	return placementJSON{Placement: p, URL: p.Redacted(), Tenants: tenants}
}

// placementsWithTenants is every placement and its count of tenants.
func placementsWithTenants(ctx context.Context, reg *placement.Registry) ([]placement.Placement, map[string]int, error) {
	ps, err := reg.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	counts, err := reg.Tenants(ctx)
	return ps, counts, err
}

func listPlacements(ctx context.Context, reg *placement.Registry, asJSON bool, stdout io.Writer) error {
	ps, counts, err := placementsWithTenants(ctx, reg)
	if err != nil {
		return err
	}
	if asJSON {
		out := []placementJSON{}
		for _, p := range ps {
			out = append(out, placementView(p, counts[p.Name]))
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"placements": out})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLACEMENT\tSTATUS\tEPOCH\tTENANTS\tDATABASE\tNOTE")
	for _, p := range ps {
		where := p.Redacted()
		if p.Name == placement.Pool {
			where = "(this database)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", p.Name, p.Status, p.Epoch, counts[p.Name], where, p.Note)
	}
	return tw.Flush()
}

// placementHealth is what `placements status` reports of one placement.
type placementHealth struct {
	Name        string             `json:"name"`
	Reachable   bool               `json:"reachable"`
	Error       string             `json:"error,omitempty"`
	Schema      string             `json:"schema"` // current, or what is wrong
	Head        string             `json:"head,omitempty"`
	Tenants     int                `json:"tenants"`
	Projections []placementRunners `json:"projections"`
}

type placementRunners struct {
	Name      string  `json:"name"`
	State     string  `json:"state"`
	LagEvents int64   `json:"lag_events"`
	LagSecs   float64 `json:"lag_seconds"`
	Parked    int64   `json:"dead_letters"`
}

func placementsStatus(ctx context.Context, e env, reg *placement.Registry, only string, asJSON bool, stdout io.Writer) error {
	ps, counts, err := placementsWithTenants(ctx, reg)
	if err != nil {
		return err
	}
	poolURL, _, stopDB, err := e.database(ctx, discardLog)
	if err != nil {
		return err
	}
	defer stopDB()
	var out []placementHealth
	unhealthy := 0
	for _, p := range ps {
		if only != "" && p.Name != only {
			continue
		}
		u := p.URL
		if p.Name == placement.Pool {
			u = poolURL
		}
		h := checkPlacement(ctx, e.mods, p.Name, u)
		h.Tenants = counts[p.Name]
		if !h.Reachable || h.Schema != "current" {
			unhealthy++
		}
		out = append(out, h)
	}
	if only != "" && len(out) == 0 {
		return fmt.Errorf("%w: %s", placement.ErrNotFound, only)
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(map[string]any{"placements": out}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PLACEMENT\tREACHABLE\tSCHEMA\tTENANTS\tHEAD\tPROJECTIONS")
		for _, h := range out {
			var runners []string
			for _, r := range h.Projections {
				runners = append(runners, fmt.Sprintf("%s %s lag %d", r.Name, r.State, r.LagEvents))
			}
			reach := "yes"
			if !h.Reachable {
				reach = "no: " + h.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", h.Name, reach, h.Schema, h.Tenants, h.Head, strings.Join(runners, ", "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if unhealthy > 0 {
		return fmt.Errorf("%d placement(s) unreachable or not migrated", unhealthy)
	}
	return nil
}

// checkPlacement connects to a placement as its serving logins and reads
// its schema, log head and projections.
func checkPlacement(ctx context.Context, mods module.Set, name, ownerURL string) placementHealth {
	h := placementHealth{Name: name, Projections: []placementRunners{}}
	c, err := placementConns(ownerURL)
	if err != nil {
		h.Error = err.Error()
		return h
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	app, err := db.OpenPool(cctx, c.app.url, db.PoolConfig{Role: db.RoleApp, MaxConns: 2, AppName: "strata-placements"})
	if err != nil {
		h.Error = pgMessage(err)
		return h
	}
	defer app.Close()
	proj, err := db.OpenPool(cctx, c.proj.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2, AppName: "strata-placements"})
	if err != nil {
		h.Error = pgMessage(err)
		return h
	}
	defer proj.Close()
	if err := app.Ping(cctx); err != nil {
		h.Error = pgMessage(err)
		return h
	}
	h.Reachable = true
	h.Schema = "current"
	if err := db.Check(cctx, app, mods.Lines()...); err != nil {
		h.Schema = err.Error()
		return h
	}
	store := postgres.New(app, proj)
	if head, err := store.LastCommitted(cctx); err == nil {
		h.Head = head.Token()
	}
	stats, err := projections.NewMonitor(projections.MonitorConfig{App: app, Log: store, Names: projections.Names(mods.Projections())}).All(cctx)
	if err != nil {
		h.Error = errors.Join(errors.New("projections"), err).Error()
		return h
	}
	for _, s := range stats {
		h.Projections = append(h.Projections, placementRunners{Name: s.Name, State: string(s.State), LagEvents: s.LagEvents, LagSecs: s.LagSeconds, Parked: s.ParkedLetters})
	}
	return h
}
