package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgembed"
)

// Config sizes a benchmark run.
type Config struct {
	Runs     int           // repetitions per variant (median, min, max)
	Duration time.Duration // measured time per run
	Warmup   time.Duration // unmeasured time before each run
	CatchUp  int           // events seeded for the catch-up and rebuild workloads
	// TenantOthers is how many events of other tenants precede the small
	// tenant's in the tenant workload.
	TenantOthers int
	Workloads    []string  // names to run; empty = all
	Progress     io.Writer `json:"-"` // progress lines
	StrataPath   string    // binary used for end-to-end workloads (strata serve)
	// PGStats, when above zero, loads pg_stat_statements and prints each
	// workload's top PGStats statements by execution time: where
	// PostgreSQL's time went, next to the throughput it explains.
	PGStats int
}

// Full is the configuration of `make bench`.
func Full() Config {
	return Config{Runs: 3, Duration: 10 * time.Second, Warmup: 2 * time.Second, CatchUp: 1_000_000, TenantOthers: 4_000_000}
}

// Quick is the configuration of `make bench-quick`: the same workloads,
// small enough to run in about a minute, for catching breakage.
func Quick() Config {
	return Config{Runs: 1, Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, CatchUp: 20_000, TenantOthers: 20_000}
}

// Result is one workload at one concurrency.
type Result struct {
	Workload    string   `json:"workload"`
	Concurrency int      `json:"concurrency"`
	Unit        string   `json:"unit"`
	Strata      Summary  `json:"strata"`
	Raw         *Summary `json:"raw,omitempty"`
	RawLabel    string   `json:"raw_label,omitempty"`
	// Ratio is strata's median throughput over the raw baseline's.
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	Note   string  `json:"note,omitempty"`
}

// Report is the whole output of a run.
type Report struct {
	StartedAt  time.Time         `json:"started_at"`
	Seconds    float64           `json:"seconds"`
	Config     Config            `json:"config"`
	Machine    map[string]string `json:"machine"`
	PostgreSQL map[string]string `json:"postgresql_settings"`
	Results    []Result          `json:"results"`
}

// Settings of the throwaway PostgreSQL, fixed and printed with every
// report so that runs are comparable. Durability is on: the numbers are
// what a production configuration pays.
var Settings = map[string]string{
	"shared_buffers":               "1GB",
	"effective_cache_size":         "8GB",
	"work_mem":                     "16MB",
	"maintenance_work_mem":         "512MB",
	"wal_buffers":                  "64MB",
	"max_wal_size":                 "8GB",
	"min_wal_size":                 "1GB",
	"checkpoint_timeout":           "30min",
	"checkpoint_completion_target": "0.9",
	"synchronous_commit":           "on",
	"fsync":                        "on",
	"full_page_writes":             "on",
	"jit":                          "off",
	"max_connections":              "300",
}

// Env is what workloads share: the server and its superuser URL.
type Env struct {
	Server *pgembed.Server
	cfg    Config
	seeded *logDB
}

func (e *Env) logf(format string, args ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, format+"\n", args...)
	}
}

// newDatabase creates and migrates a database for one workload.
func (e *Env) newDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, e.Server.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	url := e.Server.URLFor(name)
	if err := db.Up(ctx, url, nil, examples.All().Lines()...); err != nil {
		return "", err
	}
	// What `strata migrate up` does besides the schema: the serving logins
	// strata serve logs in as (without a password: the throwaway cluster
	// trusts loopback).
	var logins []db.Login
	for role, user := range map[string]string{db.RoleApp: db.LoginApp, db.RoleProjector: db.LoginProjector} {
		u, err := db.LoginURL(url, user)
		if err != nil {
			return "", err
		}
		logins = append(logins, db.Login{Role: role, URL: u})
	}
	return url, db.EnsureLogins(ctx, url, logins, nil)
}

type workload struct {
	name string
	run  func(ctx context.Context, e *Env) ([]Result, error)
}

var workloads = []workload{
	{"append", benchAppend},
	{"http", benchHTTP},
	{"catchup", benchCatchUp},
	{"rebuild", benchRebuild},
	{"verify", benchVerify},
	{"tenant", benchTenantWork},
	{"partitions", benchPartitions},
	{"personal", benchPersonal},
	{"conditional", benchConditional},
	{"longstream", benchLongStream},
}

// Names lists the workloads in run order.
func Names() []string {
	out := make([]string, len(workloads))
	for i, w := range workloads {
		out[i] = w.name
	}
	return out
}

// Execute starts a throwaway PostgreSQL in dir, runs the configured workloads
// and returns the report.
func Execute(ctx context.Context, dir string, cfg Config) (*Report, error) {
	start := time.Now()
	selected := map[string]bool{}
	for _, w := range cfg.Workloads {
		known := false
		for _, k := range workloads {
			known = known || k.name == w
		}
		if !known {
			return nil, fmt.Errorf("unknown workload %q (have %v)", w, Names())
		}
		selected[w] = true
	}
	env := &Env{cfg: cfg}
	settings := maps.Clone(Settings)
	if cfg.PGStats > 0 {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	env.logf("starting a throwaway PostgreSQL in %s", dir)
	srv, err := pgembed.Start(ctx, pgembed.Config{DataDir: dir, Mode: pgembed.Child, Settings: settings})
	if err != nil {
		return nil, err
	}
	defer srv.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
	env.Server = srv
	rep := &Report{StartedAt: start.UTC(), Config: cfg, Machine: machine(), PostgreSQL: settings}
	for _, w := range workloads {
		if len(selected) > 0 && !selected[w.name] {
			continue
		}
		env.logf("== %s", w.name)
		if err := env.resetPGStats(ctx); err != nil {
			return rep, fmt.Errorf("pg_stat_statements: %w", err)
		}
		res, err := w.run(ctx, env)
		if err != nil {
			return rep, fmt.Errorf("workload %s: %w", w.name, err)
		}
		rep.Results = append(rep.Results, res...)
		if err := env.printPGStats(ctx, w.name); err != nil {
			return rep, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

func machine() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{
		"cpus":     fmt.Sprint(runtime.NumCPU()),
		"go":       runtime.Version(),
		"os":       runtime.GOOS + "/" + runtime.GOARCH,
		"hostname": host,
	}
}

// closedLoop runs op from n workers: each calls op again as soon as the
// previous call returns. Calls during the warm-up are not recorded. The
// measured time is d, or longer until the first operation has ended.
func closedLoop(ctx context.Context, n int, warmup, d time.Duration, op func(ctx context.Context, worker int, rng *rand.Rand) error) Run {
	var rec recorder
	var measuring atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				t0 := time.Now()
				err := op(ctx, w, rng)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						rec.fail()
					}
					continue
				}
				rec.add(time.Since(t0))
			}
		}()
	}
	time.Sleep(warmup)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	// On a machine loaded enough that no operation ended within d (32
	// writers opening their connections in a 300 ms smoke run), the run
	// goes on until one has: a throughput of 0 is no measurement, and a
	// ratio against it is meaningless.
	for rec.done() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	measuring.Store(false)
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	return rec.run(elapsed)
}

func ratioOf(strata, raw Summary) float64 {
	if raw.Median.Throughput == 0 {
		return 0
	}
	return strata.Median.Throughput / raw.Median.Throughput
}

func met(ok bool) *bool { return &ok }
