package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/module"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

const tenantsPortabilityUsage = `Usage:
  strata tenants export T [--out FILE] [--catch-up 2m] [--json]   write T's archive (default FILE: T-<time>.strata.tar.gz; - for stdout)
  strata tenants import FILE [--tenant T] [--wait 2m] [--json]    load an archive into an empty tenant (provisioned if missing);
         [--max-archive 1GiB] [--max-unpacked 4GiB]               --wait: wait for the projections and compare the read models (0: don't)
         [--max-event 256KiB] [--max-line 1MiB]                   the limits: archive size, unpacked size, one event, one line,
         [--max-events 1000000] [--timeout 1h]                    events, and the import's duration; a stopped import resumes when rerun
  exit 6: imported (committed, the tenant in the directory), but --wait did not verify the read models
`

// exitUnverified: an import committed every event and put the tenant in
// the directory, but its --wait did not verify the read models (they did
// not catch up in time, or differ). Running the import again does not
// help (it is refused: already imported); see how the projections are
// doing instead.
const exitUnverified = 6

// cmdTenantsPortability is `strata tenants export|import` (docs/tenants.md,
// "Export and import").
func cmdTenantsPortability(ctx context.Context, sub string, args []string, e env, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the manifest (export) or the result (import) as JSON")
	out := fs.String("out", "", "archive file (export)")
	catchUp := fs.Duration("catch-up", 2*time.Minute, "how long an export waits for the projections to reach the tenant's last event")
	into := fs.String("tenant", "", "tenant to import into (default: the archive's)")
	wait := fs.Duration("wait", 2*time.Minute, "how long an import waits for the projections to catch up before comparing read models (0: return after the load)")
	def := portability.DefaultImportLimits
	maxArchive, maxUnpacked := byteSize(def.ArchiveBytes), byteSize(def.UnpackedBytes)
	maxEvent, maxLine := byteSize(def.EventBytes), byteSize(def.LineBytes)
	fs.Var(&maxArchive, "max-archive", "largest archive an import reads, as given (gzip'd): bytes or KiB/MiB/GiB")
	fs.Var(&maxUnpacked, "max-unpacked", "largest tar stream the archive may unpack to (a gzip bomb's bound)")
	fs.Var(&maxEvent, "max-event", "largest event (data and metadata) an import accepts")
	fs.Var(&maxLine, "max-line", "longest line of any file of the archive")
	maxEvents := fs.Int64("max-events", def.Events, "most events an import accepts")
	timeout := fs.Duration("timeout", def.Duration, "longest an import may run (not counting --wait); a rerun continues after what it committed")
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	bad := func(msg string) int {
		fmt.Fprintf(stderr, "strata tenants %s: %s\n\n%s", sub, msg, tenantsPortabilityUsage)
		return exitUsage
	}
	if len(pos) != 1 {
		if sub == "export" {
			return bad("needs one tenant ID")
		}
		return bad("needs one archive file")
	}
	svc, closeAll, err := openPortability(ctx, e, stderr, *catchUp)
	if err != nil {
		fmt.Fprintln(stderr, "strata tenants:", err)
		return exitFailure
	}
	defer closeAll()
	switch sub {
	case "export":
		tenant, err := domain.ParseTenantID(pos[0])
		if err != nil {
			return bad("the tenant ID must match [a-z0-9-]{1,63}")
		}
		return tenantsExport(ctx, svc, tenant, *out, *asJSON, stdout, stderr)
	default:
		var t domain.TenantID
		if *into != "" {
			if t, err = domain.ParseTenantID(*into); err != nil {
				return bad("--tenant must match [a-z0-9-]{1,63}")
			}
		}
		lim := portability.ImportLimits{ArchiveBytes: int64(maxArchive), UnpackedBytes: int64(maxUnpacked), EventBytes: int(maxEvent),
			LineBytes: int(maxLine), Events: *maxEvents, Duration: *timeout}
		if lim.ArchiveBytes <= 0 || lim.UnpackedBytes <= 0 || lim.EventBytes <= 0 || lim.LineBytes <= 0 || lim.Events <= 0 || lim.Duration <= 0 {
			return bad("the import limits must be positive")
		}
		return tenantsImport(ctx, svc, pos[0], portability.ImportOptions{Tenant: t, Wait: *wait, Limits: lim}, *asJSON, stdout, stderr)
	}
}

func tenantsExport(ctx context.Context, svc *portability.Service, tenant domain.TenantID, out string, asJSON bool, stdout, stderr io.Writer) int {
	if out == "" {
		out = string(tenant) + "-" + time.Now().UTC().Format("20060102T150405Z") + ".strata.tar.gz"
	}
	var w io.Writer = stdout
	var tmp *os.File
	if out != "-" {
		var err error
		if tmp, err = os.CreateTemp(filepath.Dir(out), ".strata-export-*"); err != nil {
			return tenantsFailed(stderr, err)
		}
		defer os.Remove(tmp.Name())
		w = tmp
	}
	m, err := svc.Export(ctx, tenant, w)
	if err == nil && tmp != nil {
		if err = tmp.Close(); err == nil {
			err = os.Rename(tmp.Name(), out)
		}
	}
	if err != nil {
		if tmp != nil {
			tmp.Close()
		}
		return tenantsFailed(stderr, err)
	}
	if asJSON && out != "-" {
		return printJSON(stdout, m)
	}
	if out != "-" {
		fmt.Fprintf(stdout, "exported %s to %s\n", tenant, out)
		printFiles(stdout, m)
		if !m.Export.Quiescent {
			fmt.Fprintln(stdout, "note: the tenant was written to during the export; suspend it first for an archive whose read models match its events exactly")
		}
	}
	return exitOK
}

// tenantsImport runs an import and says what it did, honestly: an import
// that committed everything and put the tenant in the directory is not a
// failure because its --wait could not verify the read models (exit 6,
// and the message says the data is there). Everything printed that comes
// from the archive goes through terminalSafe.
func tenantsImport(ctx context.Context, svc *portability.Service, file string, o portability.ImportOptions, asJSON bool, stdout, stderr io.Writer) int {
	f, err := os.Open(file)
	if err != nil {
		return tenantsFailed(stderr, err)
	}
	defer f.Close()
	res, err := svc.Import(ctx, f, o)
	if asJSON && (err == nil || res.Events > 0) {
		printJSON(stdout, res)
	}
	if !asJSON && (err == nil || res.Complete) {
		printImport(stdout, res)
	}
	switch {
	case err == nil:
		return exitOK
	case res.Complete:
		state := "the tenant is served"
		if res.Status != "active" {
			state = fmt.Sprintf("the tenant stays %s", res.Status)
		}
		fmt.Fprintf(stderr, "strata tenants: %s\nthe import itself is complete: its %d events are committed and %s; only the verification failed. "+
			"Do not import again: check how far the projections are with `strata replay status`, and compare later with `strata tenants export %s`.\n",
			terminalSafe(err.Error()), res.Events, state, res.Tenant)
		return exitUnverified
	default:
		fmt.Fprintln(stderr, "strata tenants:", terminalSafe(err.Error()))
		return exitFailure
	}
}

// printImport prints an import's result for a person.
func printImport(w io.Writer, res portability.ImportResult) {
	fmt.Fprintf(w, "imported %d events into %s (archive of %s; event IDs %s), %d idempotency records; %d dead letters kept in the archive, not restored\n",
		res.Events, res.Tenant, res.From, res.EventIDs, res.Idempotency, res.DeadLetters)
	if res.Resumed > 0 {
		fmt.Fprintf(w, "continued an earlier run of this import, which had committed %d events\n", res.Resumed)
	}
	fmt.Fprintln(w, "the imported history is marked as imported: no process manager decides it and the relay does not publish it")
	switch {
	case res.Provisioned:
		fmt.Fprintf(w, "provisioned %s\n", res.Tenant)
	case res.Status != "" && res.Status != "active":
		fmt.Fprintf(w, "%s stays %s: resume it with `strata tenants resume %s --reason ...`\n", res.Tenant, res.Status, res.Tenant)
	}
	tables := make([]string, 0, len(res.ReadModels))
	for t := range res.ReadModels {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		fmt.Fprintf(w, "  %-28s %s\n", terminalSafe(t), res.ReadModels[t])
	}
}

// terminalSafe escapes what a terminal would interpret (control
// characters, C1 included, and other non-printable runes) the way %q
// does, leaving the rest of the text as it is: archive names and values
// reach messages, and an escape sequence in one must not reach the
// operator's terminal (issue 29, finding 15).
func terminalSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\n' || r == '\t' || (unicode.IsPrint(r) && r != utf8.RuneError) || r == ' ' {
			b.WriteRune(r)
			continue
		}
		if r == utf8.RuneError { // invalid UTF-8: shown, not passed on
			b.WriteString(`\ufffd`)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// byteSize is a flag of a size in bytes: a number, optionally with KiB,
// MiB or GiB.
type byteSize int64

func (b *byteSize) String() string {
	switch n := int64(*b); {
	case n > 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return strconv.FormatInt(n, 10)
	}
}

func (b *byteSize) Set(v string) error {
	num, unit := v, int64(1)
	for suffix, u := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			num, unit = n, u
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/unit {
		return fmt.Errorf("%q: want a positive number of bytes, optionally with KiB, MiB or GiB", v)
	}
	*b = byteSize(n * unit)
	return nil
}

func printFiles(w io.Writer, m portability.Manifest) {
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-40s %8d  %s\n", n, m.Files[n].Count, m.Files[n].SHA256)
	}
}

// portabilityConfig is what the export and import need of the modules:
// every projection's tables and the columns among them that hold log
// positions.
func portabilityConfig(mods module.Set) portability.Config {
	var cfg portability.Config
	seen := map[string]bool{}
	for _, p := range mods.Projections() {
		cfg.Projections = append(cfg.Projections, p.Name())
		var posCols []string
		if pc, ok := p.(portability.PositionColumnser); ok {
			posCols = pc.PositionColumns()
		}
		for _, t := range p.Tables() {
			if seen[t] {
				continue
			}
			seen[t] = true
			cfg.Tables = append(cfg.Tables, portability.Table{Name: t, PositionColumns: posCols})
		}
	}
	return cfg
}

// exportJobs runs the platform API's export jobs in serve (nil without the
// owner connection: the routes answer 503 there, and with an EventStoreDB
// log, which the export does not read), capped and kept as
// STRATA_EXPORT_* say (docs/tenants.md, "Export jobs over HTTP").
func exportJobs(ctx context.Context, a *app, store *tenancy.Store) (*portability.Jobs, error) {
	if store == nil || a.pools.owner == nil || a.projPool == nil || a.external {
		return nil, nil
	}
	// A running job holds a connection of the serving pools: the jobs must
	// leave at least half of them to the requests. The default fits a
	// small pool; a setting that does not is refused.
	half := max(1, int(a.appPool.Config().MaxConns)/2)
	var jc portability.JobsConfig
	var err error
	if jc.MaxRunning, err = a.env.integer("STRATA_EXPORT_MAX_RUNNING", min(portability.DefaultMaxRunning, half)); err != nil {
		return nil, err
	}
	if jc.MaxRunning > half {
		return nil, fmt.Errorf("STRATA_EXPORT_MAX_RUNNING=%d: at most half of STRATA_DB_MAX_CONNS (%d): each running export holds a serving connection", jc.MaxRunning, half)
	}
	if jc.MaxRunningPerTenant, err = a.env.integer("STRATA_EXPORT_MAX_RUNNING_PER_TENANT", min(portability.DefaultMaxRunningPerTenant, jc.MaxRunning)); err != nil {
		return nil, err
	}
	if jc.Retention, err = a.env.duration("STRATA_EXPORT_RETENTION", portability.DefaultRetention); err != nil {
		return nil, err
	}
	jc.Logger = a.logger
	cfg := portabilityConfig(a.env.mods)
	cfg.App, cfg.Projector, cfg.Owner, cfg.Actor = a.appPool, a.projPool, a.pools.owner, "serve"
	cfg.Registry = a.registry // opens the sealed personal data an archive carries opened
	svc, err := portability.New(cfg)
	if err != nil {
		a.logger.Warn("tenant exports are off", "error", err.Error())
		return nil, nil
	}
	jobs, err := portability.NewJobs(ctx, svc, jc)
	if err != nil {
		return nil, fmt.Errorf("STRATA_EXPORT_*: %w", err)
	}
	return jobs, nil
}

// openPortability connects as `strata replay` does: the owner connection
// (DATABASE_URL or the embedded PostgreSQL) for the directory and the
// audit, and pools as strata_app and strata_projector (the serving logins'
// URLs when set, else the owner's login switching roles).
func openPortability(ctx context.Context, e env, stderr io.Writer, catchUp time.Duration) (*portability.Service, func(), error) {
	p, closeAll, err := openPortabilityParts(ctx, e, stderr, catchUp)
	if err != nil {
		return nil, nil, err
	}
	return p.svc, closeAll, nil
}

// portabilityParts are an export and import service and the pools and
// directory under it (an archive purges and fences with them).
type portabilityParts struct {
	svc              *portability.Service
	owner, app, proj *pgxpool.Pool
	store            *tenancy.Store
}

func openPortabilityParts(ctx context.Context, e env, stderr io.Writer, catchUp time.Duration) (portabilityParts, func(), error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	url, _, stopDB, err := e.database(ctx, logger)
	if errors.Is(err, errNoOwnerURL) {
		return portabilityParts{}, nil, errors.New("DATABASE_URL is not set: export and import run on the owner connection")
	}
	if err != nil {
		return portabilityParts{}, nil, err
	}
	if es := e.str("STRATA_EVENT_STORE", "postgres"); es != "postgres" {
		stopDB()
		return portabilityParts{}, nil, errors.New("export and import read and write the PostgreSQL log; STRATA_EVENT_STORE names another store")
	}
	var pools []*pgxpool.Pool
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
		stopDB()
	}
	open := func(u, role string) (*pgxpool.Pool, error) {
		p, err := db.OpenPool(ctx, u, db.PoolConfig{Role: role, MaxConns: 2, AppName: "strata-tenants"})
		if err == nil {
			pools = append(pools, p)
		}
		return p, err
	}
	// The owner connection: one more, since an import holds one for its
	// lock (db.ImportLockClass) for its whole run.
	openOwner := func(u string) (*pgxpool.Pool, error) {
		p, err := db.OpenPool(ctx, u, db.PoolConfig{Role: db.RoleProjector, MaxConns: 3, AppName: "strata-tenants"})
		if err == nil {
			pools = append(pools, p)
		}
		return p, err
	}
	owner, err := openOwner(url)
	if err == nil {
		err = db.Check(ctx, owner, e.mods.Lines()...)
		if err != nil {
			err = fmt.Errorf("%v: run `strata migrate up`", err)
		}
	}
	var app, proj *pgxpool.Pool
	if err == nil {
		app, err = open(e.str("STRATA_APP_DATABASE_URL", url), db.RoleApp)
	}
	if err == nil {
		proj, err = open(e.str("STRATA_PROJECTOR_DATABASE_URL", url), db.RoleProjector)
	}
	var store *tenancy.Store
	if err == nil {
		store, err = newTenantStore(e, owner)
	}
	if err != nil {
		closeAll()
		return portabilityParts{}, nil, err
	}
	actor := tenancy.Actor{Subject: "cli:" + osUser()}
	cfg := portabilityConfig(e.mods)
	cfg.App, cfg.Projector, cfg.Owner, cfg.Actor, cfg.CatchUp = app, proj, owner, actor.Subject, catchUp
	if cfg.Registry, err = e.mods.Registry(); err == nil {
		cfg.Registry, err = protect(ctx, e, cfg.Registry, app)
	}
	if err != nil {
		closeAll()
		return portabilityParts{}, nil, err
	}
	cfg.Provision = func(ctx context.Context, t domain.TenantID) error {
		_, err := store.Provision(ctx, actor, tenancy.ProvisionRequest{ID: t})
		return err
	}
	cfg.Progress = stderrProgress(stderr)
	svc, err := portability.New(cfg)
	if err != nil {
		closeAll()
		return portabilityParts{}, nil, err
	}
	return portabilityParts{svc: svc, owner: owner, app: app, proj: proj, store: store}, closeAll, nil
}

// stderrProgress prints progress lines, at most one a second per phase and
// file, and every change of phase or file.
func stderrProgress(w io.Writer) func(portability.Progress) {
	var last time.Time
	var key string
	return func(p portability.Progress) {
		k := p.Phase + "\x00" + p.File
		if k == key && time.Since(last) < time.Second {
			return
		}
		key, last = k, time.Now()
		var b strings.Builder
		fmt.Fprintf(&b, "%s", p.Phase)
		if p.File != "" {
			fmt.Fprintf(&b, " %s", p.File)
		}
		if p.Total > 0 {
			fmt.Fprintf(&b, " %d/%d", p.Rows, p.Total)
		} else if p.Rows > 0 {
			fmt.Fprintf(&b, " %d", p.Rows)
		}
		fmt.Fprintln(w, b.String())
	}
}
