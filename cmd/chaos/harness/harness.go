package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgembed"
)

// durableSettings keep every durability guarantee PostgreSQL has (they are
// the defaults, spelled out so that nobody "speeds the harness up" into
// testing a database that may lose acknowledged commits).
var durableSettings = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"max_connections":    "200",
	// Read-model timestamps come from events; the log's recorded_at and
	// the admin lag use now(): one time zone for every session.
	"timezone": "UTC",
}

// env is what the scenarios of one run share.
type env struct {
	cfg Config
	dir string
	pg  *pgembed.Server
	// target, when set, is the cluster the scenario's databases are on
	// instead of pg (FAILOVER's Patroni cluster).
	target cluster
	secret []byte
	logf   func(format string, args ...any)
}

// Run executes the configured scenarios and returns their results (one per
// scenario, in order). The error is for a harness that could not start at
// all; a failing scenario is a Result that did not pass.
func Run(ctx context.Context, cfg Config) ([]*Result, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin, err := filepath.Abs(cfg.Strata)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("strata binary: %w", err)
	}
	cfg.Strata = bin
	if os.Getenv(failpointEnv) != "" {
		// The rebuild runs strata's projection runner in this process.
		return nil, fmt.Errorf("unset %s: the harness arms strata's failpoints itself", failpointEnv)
	}
	e := &env{cfg: cfg, logf: func(format string, args ...any) {
		fmt.Fprintf(cfg.Out, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}}
	if e.dir, err = e.workDir(); err != nil {
		return nil, err
	}
	e.logf("chaos: seed %d, work directory %s, strata %s", cfg.Seed, e.dir, cfg.Strata)
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	e.secret = []byte(hex.EncodeToString(secret))

	began := time.Now()
	e.pg, err = pgembed.Start(ctx, pgembed.Config{
		DataDir:  filepath.Join(e.dir, "pg"),
		Port:     cfg.PGPort,
		BinDir:   cfg.PGBin,
		Mode:     pgembed.Child, // dies with the harness, however it dies
		Settings: durableSettings,
		Logf:     e.logf,
	})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := e.pg.Stop(sctx); err != nil {
			e.logf("chaos: stopping PostgreSQL: %v", err)
		}
	}()
	e.logf("chaos: PostgreSQL on 127.0.0.1:%d ready after %s", e.pg.Port(), time.Since(began).Round(time.Millisecond))

	var results []*Result
	var tenancy *tenancyFixture
	for _, id := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r := &Result{Scenario: id}
		start := time.Now()
		e.logf("=== %s", id)
		var err error
		switch id {
		case R1:
			err = e.runR1(ctx, r)
		case R2:
			err = e.runR2(ctx, r)
		case R5:
			err = e.runR5(ctx, r)
		case R14:
			err = e.runR14(ctx, r)
		case R15:
			err = e.runR15(ctx, r)
		case Starve:
			err = e.runStarve(ctx, r)
		case R18:
			err = e.runR18(ctx, r)
		case PM1:
			err = e.runPM1(ctx, r)
		case Erase:
			err = e.runErase(ctx, r)
		case Subject:
			err = e.runSubject(ctx, r)
		case Move:
			err = e.runMove(ctx, r)
		case Restore:
			err = e.runRestore(ctx, r)
		case Hostile:
			err = e.runHostile(ctx, r)
		case Failover:
			err = e.runFailover(ctx, r)
		case R11, R12:
			if tenancy == nil {
				tenancy, err = e.newTenancyFixture(ctx)
				if err != nil {
					err = fmt.Errorf("tenancy fixture: %w", err)
					break
				}
				defer tenancy.close()
			}
			if id == R11 {
				err = e.runR11(ctx, r, tenancy)
			} else {
				err = e.runR12(ctx, r, tenancy)
			}
		}
		r.Err = err
		r.Duration = time.Since(start)
		verdict := "PASS"
		if !r.Passed() {
			verdict = "FAIL"
		}
		if err != nil {
			e.logf("=== %s: harness error: %v", id, err)
		}
		e.logf("=== %s %s in %s", id, verdict, r.Duration.Round(100*time.Millisecond))
		results = append(results, r)
	}
	allPassed := len(results) == len(cfg.Scenarios)
	for _, r := range results {
		allPassed = allPassed && r.Passed()
	}
	if cfg.WorkDir == "" && ((allPassed && !cfg.Keep) || cfg.Discard) {
		defer func() { _ = os.RemoveAll(e.dir) }()
	} else {
		e.logf("chaos: logs, histories and the cluster are kept in %s", e.dir)
	}
	return results, ctx.Err()
}

func (e *env) workDir() (string, error) {
	dir := e.cfg.WorkDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "strata-chaos-"); err != nil {
			return "", err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The postgres OS user (PostgreSQL runs as it when we are root) must
	// be able to traverse the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}

// rng returns the random source of one part of one scenario: derived from
// the run's seed and the names, so that running a subset of the scenarios
// makes the same choices as the full run.
func (e *env) rng(names ...string) *mrand.Rand {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return mrand.New(mrand.NewPCG(uint64(e.cfg.Seed), h.Sum64()))
}

// cluster is what the harness needs of a PostgreSQL cluster to make
// databases and read them: pgembed's Server, or FAILOVER's Patroni cluster
// (whose URLs name every member and ask for the one that accepts writes).
type cluster interface {
	URL() string
	URLFor(database string) string
}

// cluster is the scenario's cluster: target when set, else pg.
func (e *env) cluster() cluster {
	if e.target != nil {
		return e.target
	}
	return e.pg
}

// adminURL is a superuser URL to database name (setup, checks and fault
// injection only; strata's own pools switch to their roles).
func (e *env) adminURL(name string) string { return e.cluster().URLFor(name) }

// createDatabase makes an empty database.
func (e *env) createDatabase(ctx context.Context, name string) error {
	return createDatabaseOn(ctx, e.cluster(), name)
}

// createDatabaseOn makes an empty database on the cluster srv (MOVE
// starts a second one).
func createDatabaseOn(ctx context.Context, srv cluster, name string) error {
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if r, ok := srv.(replicated); ok {
		return r.awaitDatabase(ctx, name)
	}
	return nil
}

// replicated is a cluster of several members (Patroni's), whose standbys
// must have replayed a new database before a multi-host URL can name it:
// pgx (like libpq) gives up on the first member that answers "database
// does not exist" instead of trying the next one.
type replicated interface {
	awaitDatabase(ctx context.Context, name string) error
}

// dropDatabase removes a database (best effort).
func (e *env) dropDatabase(ctx context.Context, name string) {
	conn, err := pgx.Connect(ctx, e.cluster().URL())
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// newStrataDatabase creates a database and migrates it with the binary
// under test, as an operator would (`strata migrate up`).
func (e *env) newStrataDatabase(ctx context.Context, name string) (string, error) {
	if err := e.createDatabase(ctx, name); err != nil {
		return "", err
	}
	url := e.adminURL(name)
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, e.cfg.Strata, "migrate", "up")
	cmd.Env = e.strataEnv(url, filepath.Join(e.dir, name+"-migrate"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("strata migrate up: %w\n%s", err, out.String())
	}
	return url, nil
}

// strataEnv is the whole environment of a strata process: nothing is
// inherited but PATH and HOME, so that a developer's DATABASE_URL, OTEL_*
// or STRATA_* settings cannot change what is tested.
func (e *env) strataEnv(url, dataDir string, extra ...string) []string {
	out := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + url,
		"STRATA_DATA_DIR=" + dataDir,
		"STRATA_JWT_SECRET=" + string(e.secret),
		"STRATA_AUTO_MIGRATE=false",
		"STRATA_RATE_COMMANDS=unlimited",
		"STRATA_RATE_QUERIES=unlimited",
		"STRATA_LOG_LEVEL=" + e.cfg.LogLevel,
		// The scenarios' checkers know every append to a stream: the
		// fulfilment process manager's own commands would be phantoms.
		// PM1 turns it on (STRATA_PROCESSES=all among extra: the last
		// value of a variable wins).
		"STRATA_PROCESSES=none",
		// The scenarios' tenants are not provisioned in the directory.
		"STRATA_REQUIRE_TENANT_DIRECTORY=false",
	}
	return append(out, extra...)
}
