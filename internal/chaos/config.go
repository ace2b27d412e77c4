package chaos

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Scenario IDs, in the order a full run executes them.
const (
	R1  = "R1"
	R2  = "R2"
	R5  = "R5"
	R11 = "R11"
	R12 = "R12"
)

// AllScenarios lists every scenario the harness implements, in run order.
var AllScenarios = []string{R1, R2, R5, R11, R12}

// LoadConfig sizes the command load of R1, R2 and R5.
type LoadConfig struct {
	// Clients run concurrently, each issuing Commands commands.
	Clients  int
	Commands int
	// Tenants and Streams: the orders (streams) are spread evenly over the
	// tenants; every client writes to every stream.
	Tenants int
	Streams int
	// Pace spreads each client's commands over this long (the k-th command
	// does not start before k*Pace/Commands), so that faults land during
	// the load; a slower system simply runs behind.
	Pace time.Duration
	// MaxDuration stops issuing new commands after this long, however
	// many are left (commands in flight still resolve).
	MaxDuration time.Duration
	// RequestTimeout bounds one HTTP attempt.
	RequestTimeout time.Duration
	// RetryFor bounds how long an indeterminate command is retried with
	// its idempotency key before it is recorded as unresolved.
	RetryFor time.Duration
}

// R1Config: SIGKILL the serving processes at random under load.
type R1Config struct {
	Load      LoadConfig
	Processes int // strata serve processes, each with every role
	// KillMin and KillMax bound the pause between kills.
	KillMin, KillMax time.Duration
	// MaxKills stops killing after this many kill rounds (0: until the
	// load ends).
	MaxKills int
	// FailpointMin..FailpointMax: every serve incarnation arms strata's
	// projector.before-commit failpoint on a random hit in this range, so
	// that besides the random kills the active projector is also killed
	// exactly between a batch's read-model writes and its commit (0: off).
	FailpointMin, FailpointMax int
	// FailpointFirst, when above zero, arms the first incarnation of each
	// process on a hit in 1..FailpointFirst instead: however the batches
	// fall (a loaded machine applies fewer, larger ones), the active
	// projector dies at its failpoint early in the run at least once.
	FailpointFirst int
	// CatchUp is the most the projections may take to reach the head of
	// the log after the last restart (or the end of the load, if later).
	CatchUp time.Duration
}

// R2Config: crash PostgreSQL (immediate shutdown) under load.
type R2Config struct {
	Load      LoadConfig
	Processes int
	// Crashes happen at FirstCrash, then every Every; each keeps
	// PostgreSQL down for Down.
	Crashes    int
	FirstCrash time.Duration
	Every      time.Duration
	Down       time.Duration
	// FirstSuccess is the most the first successful command may take after
	// PostgreSQL accepts connections again.
	FirstSuccess time.Duration
	CatchUp      time.Duration
}

// R5Config: a long writing transaction in another database of the cluster.
type R5Config struct {
	Load      LoadConfig
	Processes int
	// The transaction opens at HoldAt and stays open for HoldFor.
	HoldAt, HoldFor time.Duration
	// MinReportedLag is the least lag (seconds behind) the admin route
	// must have reported for every projection while the transaction was
	// open.
	MinReportedLag time.Duration
	// CatchUp is the most the projections may take to reach the head
	// after the transaction ends.
	CatchUp time.Duration
}

// R11Config: cross-tenant HTTP fuzzing.
type R11Config struct {
	Requests int
	Workers  int
}

// R12Config: cross-tenant SQL as the application role.
type R12Config struct {
	Queries int
	Workers int
}

// Config is one harness run.
type Config struct {
	// Strata is the strata binary under test (required).
	Strata string
	// WorkDir holds the cluster, the processes' logs and the histories;
	// "" makes a new directory under os.TempDir().
	WorkDir string
	// Keep keeps WorkDir even when every scenario passes (it is kept when
	// one fails, unless Discard).
	Keep bool
	// Discard removes WorkDir even when a scenario fails (make
	// chaos-broken, whose failure is the expected outcome).
	Discard bool
	// PGPort is the PostgreSQL port on 127.0.0.1 (0: any free port).
	PGPort int
	// PGBin overrides where the PostgreSQL server binaries are.
	PGBin string
	// Seed makes every random choice of the run (workload, kill times and
	// targets, fuzz requests and queries) reproducible.
	Seed int64
	// Scenarios to run, in order (default AllScenarios).
	Scenarios []string
	// LogLevel is strata's STRATA_LOG_LEVEL (default warn).
	LogLevel string
	// Out receives progress lines and the result table (default io.Discard).
	Out io.Writer

	R1  R1Config
	R2  R2Config
	R5  R5Config
	R11 R11Config
	R12 R12Config
}

// Full returns the configuration of `make chaos`: the sizes of the
// scenarios in notes/reliability.md §5 and issue 8.
func Full() Config {
	load := LoadConfig{
		Clients: 8, Commands: 600, Tenants: 4, Streams: 64,
		Pace: 45 * time.Second, MaxDuration: 120 * time.Second,
		RequestTimeout: 10 * time.Second, RetryFor: 45 * time.Second,
	}
	r2load := load
	r2load.Pace, r2load.MaxDuration = 60*time.Second, 150*time.Second
	r5load := load
	r5load.Commands, r5load.Pace = 400, 45*time.Second
	return Config{
		PGPort:    55439,
		Scenarios: AllScenarios,
		R1: R1Config{Load: load, Processes: 2, KillMin: 3 * time.Second, KillMax: 7 * time.Second,
			FailpointMin: 100, FailpointMax: 1200, FailpointFirst: 50, CatchUp: 10 * time.Second},
		R2: R2Config{Load: r2load, Processes: 2, Crashes: 3, FirstCrash: 10 * time.Second, Every: 20 * time.Second,
			Down: 2 * time.Second, FirstSuccess: 15 * time.Second, CatchUp: 10 * time.Second},
		R5: R5Config{Load: r5load, Processes: 2, HoldAt: 7 * time.Second, HoldFor: 30 * time.Second,
			MinReportedLag: 20 * time.Second, CatchUp: 5 * time.Second},
		R11: R11Config{Requests: 10_000, Workers: 4},
		R12: R12Config{Queries: 10_000, Workers: 4},
	}
}

// Short returns a small configuration for `make test`: R1 with two kill
// rounds and light load, R11 and R12 with a few hundred requests each. The
// other scenarios keep their full sizes (the test does not run them).
func Short() Config {
	c := Full()
	c.PGPort = 0
	c.Scenarios = []string{R1, R11, R12}
	c.R1.Load = LoadConfig{Clients: 3, Commands: 60, Tenants: 2, Streams: 8,
		Pace: 8 * time.Second, MaxDuration: 30 * time.Second,
		RequestTimeout: 10 * time.Second, RetryFor: 30 * time.Second}
	c.R1.MaxKills = 2
	c.R1.KillMin, c.R1.KillMax = 2*time.Second, 3*time.Second
	c.R1.FailpointMin, c.R1.FailpointMax, c.R1.FailpointFirst = 40, 200, 10
	c.R11 = R11Config{Requests: 300, Workers: 2}
	c.R12 = R12Config{Queries: 300, Workers: 2}
	return c
}

func (c *Config) setDefaults() {
	if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	}
	if c.LogLevel == "" {
		c.LogLevel = "warn"
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.Strata == "" {
		errs = append(errs, errors.New("the strata binary is required"))
	}
	if c.PGPort < 0 || c.PGPort > 65535 {
		errs = append(errs, fmt.Errorf("postgres port %d: want 0 to 65535", c.PGPort))
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q: want some of %s", s, strings.Join(AllScenarios, ",")))
		}
	}
	check := func(name string, l LoadConfig) {
		if l.Clients < 1 || l.Commands < 1 || l.Tenants < 1 || l.Streams < l.Tenants {
			errs = append(errs, fmt.Errorf("%s load: want at least one client, command and tenant, and a stream per tenant", name))
		}
		if l.MaxDuration <= 0 || l.RequestTimeout <= 0 || l.RetryFor <= 0 || l.Pace < 0 {
			errs = append(errs, fmt.Errorf("%s load: durations must be positive", name))
		}
	}
	for _, s := range c.Scenarios {
		switch s {
		case R1:
			check(R1, c.R1.Load)
			if c.R1.Processes < 1 || c.R1.KillMin <= 0 || c.R1.KillMax < c.R1.KillMin {
				errs = append(errs, errors.New("R1: want at least one process and 0 < kill min <= kill max"))
			}
			if c.R1.FailpointMin < 0 || c.R1.FailpointMax < c.R1.FailpointMin || (c.R1.FailpointMin == 0) != (c.R1.FailpointMax == 0) || c.R1.FailpointFirst < 0 || (c.R1.FailpointFirst > 0 && c.R1.FailpointMax == 0) {
				errs = append(errs, errors.New("R1: want 0 < failpoint min <= failpoint max, or both 0, and failpoint first >= 0, only with them"))
			}
		case R2:
			check(R2, c.R2.Load)
			if c.R2.Processes < 1 || c.R2.Crashes < 1 || c.R2.Down <= 0 {
				errs = append(errs, errors.New("R2: want at least one process and one crash"))
			}
		case R5:
			check(R5, c.R5.Load)
			if c.R5.Processes < 1 || c.R5.HoldFor <= 0 {
				errs = append(errs, errors.New("R5: want at least one process and a positive hold"))
			}
		case R11:
			if c.R11.Requests < 1 || c.R11.Workers < 1 {
				errs = append(errs, errors.New("R11: want at least one request and worker"))
			}
		case R12:
			if c.R12.Queries < 1 || c.R12.Workers < 1 {
				errs = append(errs, errors.New("R12: want at least one query and worker"))
			}
		}
	}
	return errors.Join(errs...)
}
