package harness

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
	R14 = "R14"
	R15 = "R15"
	// Starve: one tenant attacks with every slow request shape at once.
	Starve = "STARVE"
	// R18: the soak, load at a fraction of the measured maximum with a
	// fault of R1, R2 or R5 in turn at a fixed interval.
	R18 = "R18"
)

// AllScenarios lists every scenario `make chaos` runs, in run order.
var AllScenarios = []string{R1, R2, R5, R11, R12, R14, R15, Starve, PM1, Erase, Subject, Move, Restore, Hostile, Failover, R18}

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
	// Registrations, when above zero, is how many customers each client
	// registers besides its commands, spread among them (registrations.go):
	// guarded commands, conditional appends, racing for an address.
	// Emails is the pool of addresses of each tenant they race for, small
	// so that most races have several runners; the pool is renewed
	// EmailRounds times over each client's registrations, so that races
	// are run throughout the load, under its faults, not only at its
	// start (an address, once taken, is refused ever after).
	Registrations, Emails, EmailRounds int
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
	// Partitions is the serve processes' STRATA_PROJECTION_PARTITIONS:
	// the projections the projector processes share as partitions (issue
	// 35 §5), killed with them ("": none).
	Partitions string
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

// R14Config: oversized and malformed bodies.
type R14Config struct {
	// Requests bad requests over Workers connections at once, in turn of
	// every kind, for at most MaxDuration.
	Requests, Workers int
	MaxDuration       time.Duration
	// MaxRSSGrowth bounds the serve process's peak RSS over its RSS before.
	MaxRSSGrowth int64
	Victims      VictimConfig
}

// R15Config: slow headers and slow bodies.
type R15Config struct {
	// SlowHeaderConns connections send headers one byte every ByteEvery
	// for Duration, reconnecting when closed; SlowBodies POSTs (spread
	// over BodyTenants tenants) send their bodies as slowly.
	SlowHeaderConns int
	ByteEvery       time.Duration
	Duration        time.Duration
	SlowBodies      int
	BodyTenants     int
	// HeaderTimeout is strata's ReadHeaderTimeout; BodyTimeout is set as
	// STRATA_BODY_TIMEOUT.
	HeaderTimeout, BodyTimeout time.Duration
	// After the attack the descriptors must be back at the baseline plus
	// FDSlack within FDsBackWithin.
	FDSlack       int
	FDsBackWithin time.Duration
	Victims       VictimConfig
}

// StarveConfig: one tenant attacks with every slow request shape at once.
type StarveConfig struct {
	Duration time.Duration
	// The attack: never-ending chunked bodies, the same unauthenticated,
	// slow-header connections, slow bodies, loops of forged consistency
	// tokens with wait=10s, loops of 2 MiB bodies (every loop sends at
	// most one request per Pace), and a flood of FloodRate commands a
	// second (beyond the default command rate of 100/s).
	ChunkedConns, Unauthenticated, SlowHeaderConns, SlowBodies int
	ForgedWorkers, HugeWorkers, FloodRate                      int
	Pace                                                       time.Duration
	// MaxInFlight is STRATA_MAX_IN_FLIGHT; BodyTimeout STRATA_BODY_TIMEOUT;
	// HeaderTimeout strata's ReadHeaderTimeout.
	MaxInFlight                int
	HeaderTimeout, BodyTimeout time.Duration
	Victims                    VictimConfig
}

// R18Config: the soak. Everything not set here is derived from Duration
// (soakPlan in scenario_soak.go, docs/chaos.md R18).
type R18Config struct {
	// Duration is the open-loop part (make soak SOAK=30m; 3m in make
	// chaos). The faults, their spacing, the sampling, the warm-up and
	// the unit of the RSS criterion scale with it.
	Duration  time.Duration
	Processes int
	// Tenants and Orders: the orders open at once, spread over the
	// tenants; an order that has run through its life cycle is replaced
	// by a new one, so that the log keeps growing with accepted commands
	// however long the soak runs.
	Tenants, Orders int
	// BurstClients issue commands back to back (closed loop) for Burst
	// to measure the maximum; the soak then issues LoadFraction of it a
	// second (open loop: on a fixed schedule, whatever the latency).
	BurstClients int
	Burst        time.Duration
	LoadFraction float64
	// MaxInFlight bounds the commands under way at once (a command
	// blocked in its retries during an outage holds one); the schedule
	// slips only when it is reached, which the criteria report.
	MaxInFlight              int
	RequestTimeout, RetryFor time.Duration
	// Down is how long each R2 fault keeps PostgreSQL down.
	Down time.Duration
	// The targets (notes/reliability.md R18).
	MaxRSSGrowth float64 // per 10 minutes, for soaks of 30 minutes and more
	// MaxShortRSSGrowth bounds, for shorter soaks, the fitted RSS growth of
	// a judged incarnation in bytes: over a minute or two a rate is
	// warm-up and noise (3 MiB in 41 s read as +100 % per 10 min), an
	// absolute bound still catches a gross leak.
	MaxShortRSSGrowth  int64
	MaxGoroutineGrowth float64       // over the pre-fault baseline
	MaxLagP99          time.Duration // outside fault windows
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
	// DocsDir, when set, also receives the soak's plot and summary
	// (make soak: docs/soak).
	DocsDir string

	R1      R1Config
	R2      R2Config
	R5      R5Config
	R11     R11Config
	R12     R12Config
	R14     R14Config
	R15     R15Config
	Starve  StarveConfig
	R18     R18Config
	PM1     PM1Config     // zero: DefaultPM1()
	Erase   EraseConfig   // zero: DefaultErase()
	Subject SubjectConfig // zero: DefaultSubject()
	Move    MoveConfig    // zero: DefaultMove()
	Restore RestoreConfig // zero: DefaultRestore()
	Hostile HostileConfig // zero: DefaultHostile()
	// Failover needs Patroni and etcd (make deps).
	Failover FailoverConfig // zero: DefaultFailover()
}

// Full returns the configuration of `make chaos`: the sizes of the
// scenarios in notes/reliability.md §5 and issue 8.
func Full() Config {
	load := LoadConfig{
		Clients: 8, Commands: 600, Tenants: 4, Streams: 64,
		Pace: 45 * time.Second, MaxDuration: 120 * time.Second,
		RequestTimeout: 10 * time.Second, RetryFor: 45 * time.Second,
	}
	// R1 and R2 also register customers (R5 and the scenarios built on
	// newWorkload do not): four addresses per tenant and round, ten rounds,
	// so about three registrations race for each address.
	r1load := load
	r1load.Registrations, r1load.Emails, r1load.EmailRounds = 60, 4, 10
	r2load := r1load
	r2load.Pace, r2load.MaxDuration = 60*time.Second, 150*time.Second
	r5load := load
	r5load.Commands, r5load.Pace = 400, 45*time.Second
	return Config{
		PGPort:    55439,
		Scenarios: AllScenarios,
		R1: R1Config{Load: r1load, Processes: 2, KillMin: 3 * time.Second, KillMax: 7 * time.Second,
			FailpointMin: 100, FailpointMax: 1200, FailpointFirst: 50, CatchUp: 10 * time.Second,
			Partitions: "order_details=2,order_list=4"},
		R2: R2Config{Load: r2load, Processes: 2, Crashes: 3, FirstCrash: 10 * time.Second, Every: 20 * time.Second,
			Down: 2 * time.Second, FirstSuccess: 15 * time.Second, CatchUp: 10 * time.Second},
		R5: R5Config{Load: r5load, Processes: 2, HoldAt: 7 * time.Second, HoldFor: 30 * time.Second,
			MinReportedLag: 20 * time.Second, CatchUp: 5 * time.Second},
		R11: R11Config{Requests: 10_000, Workers: 4},
		R12: R12Config{Queries: 10_000, Workers: 4},
		R14: R14Config{Requests: 1_000, Workers: 4, MaxDuration: 90 * time.Second, MaxRSSGrowth: 50 << 20, Victims: defaultVictims},
		R15: R15Config{SlowHeaderConns: 300, ByteEvery: time.Second, Duration: 60 * time.Second, SlowBodies: 50, BodyTenants: 5,
			HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second, FDSlack: 5, FDsBackWithin: 10 * time.Second, Victims: defaultVictims},
		Starve: StarveConfig{Duration: 20 * time.Second, ChunkedConns: 150, Unauthenticated: 30, SlowHeaderConns: 100, SlowBodies: 50,
			ForgedWorkers: 150, HugeWorkers: 2, FloodRate: 300, Pace: time.Second, MaxInFlight: 256,
			HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second, Victims: defaultVictims},
		R18: R18Config{Duration: 3 * time.Minute, Processes: 2, Tenants: 4, Orders: 64, BurstClients: 16, LoadFraction: 0.30,
			MaxInFlight: 4096, RequestTimeout: 10 * time.Second, RetryFor: 45 * time.Second, Down: 2 * time.Second,
			MaxRSSGrowth: 0.10, MaxShortRSSGrowth: 16 << 20, MaxGoroutineGrowth: 0.10, MaxLagP99: time.Second},
	}
}

// defaultVictims is the well-behaved load of R14, R15 and STARVE: 3 tenants x 2
// clients, 20 requests a second each, p99 under 200 ms (issue 13).
var defaultVictims = VictimConfig{Tenants: 3, Clients: 2, Every: 50 * time.Millisecond, P99: 200 * time.Millisecond}

// Short returns a small configuration for `make test`: R1 with two kill
// rounds and light load, R11 and R12 with a few hundred requests each, and
// a 7-second STARVE. R2 and R5 keep their full sizes (the test does not run
// them); R14 and R15 get small ones for `cmd/chaos --short`.
func Short() Config {
	c := Full()
	c.PGPort = 0
	c.Scenarios = []string{R1, R11, R12}
	c.R1.Load = LoadConfig{Clients: 3, Commands: 60, Tenants: 2, Streams: 8,
		Pace: 8 * time.Second, MaxDuration: 30 * time.Second,
		RequestTimeout: 10 * time.Second, RetryFor: 30 * time.Second,
		Registrations: 12, Emails: 3, EmailRounds: 3}
	c.R1.MaxKills = 2
	c.R1.KillMin, c.R1.KillMax = 2*time.Second, 3*time.Second
	c.R1.FailpointMin, c.R1.FailpointMax, c.R1.FailpointFirst = 40, 200, 10
	c.R11 = R11Config{Requests: 300, Workers: 2}
	c.R12 = R12Config{Queries: 300, Workers: 2}
	// A small starvation case: more slow requests than the shared cap
	// (lowered to 100) and than the attacker's own limits, for longer than
	// the body timeout.
	c.Scenarios = append(c.Scenarios, Starve)
	c.Starve = StarveConfig{Duration: 7 * time.Second, ChunkedConns: 50, Unauthenticated: 5, SlowHeaderConns: 20, SlowBodies: 10,
		ForgedWorkers: 70, HugeWorkers: 1, FloodRate: 300, Pace: time.Second, MaxInFlight: 100,
		HeaderTimeout: 5 * time.Second, BodyTimeout: 3 * time.Second,
		Victims: VictimConfig{Tenants: 2, Clients: 1, Every: 50 * time.Millisecond, P99: 200 * time.Millisecond}}
	c.R14 = R14Config{Requests: 80, Workers: 2, MaxDuration: 30 * time.Second, MaxRSSGrowth: 50 << 20, Victims: c.Starve.Victims}
	c.R15 = R15Config{SlowHeaderConns: 30, ByteEvery: time.Second, Duration: 7 * time.Second, SlowBodies: 10, BodyTenants: 2,
		HeaderTimeout: 5 * time.Second, BodyTimeout: 3 * time.Second, FDSlack: 5, FDsBackWithin: 10 * time.Second, Victims: c.Starve.Victims}
	c.R18.Duration = time.Minute
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
		if l.Registrations < 0 || (l.Registrations > 0 && (l.Emails < 1 || l.EmailRounds < 1 || l.EmailRounds > l.Registrations)) {
			errs = append(errs, fmt.Errorf("%s load: registrations want at least one address and 1 to registrations rounds", name))
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
		case R14:
			if c.R14.Requests < 1 || c.R14.Workers < 1 || c.R14.MaxDuration <= 0 || c.R14.MaxRSSGrowth <= 0 {
				errs = append(errs, errors.New("R14: want at least one request and worker, a positive duration and RSS bound"))
			}
			errs = append(errs, c.R14.Victims.validate(R14))
		case R15:
			if c.R15.SlowHeaderConns < 1 || c.R15.SlowBodies < 0 || c.R15.BodyTenants < 1 || c.R15.ByteEvery <= 0 || c.R15.Duration <= 0 ||
				c.R15.HeaderTimeout <= 0 || c.R15.BodyTimeout <= 0 || c.R15.FDsBackWithin <= 0 {
				errs = append(errs, errors.New("R15: want slow connections, a body tenant and positive durations"))
			}
			errs = append(errs, c.R15.Victims.validate(R15))
		case Starve:
			st := c.Starve
			if st.Duration <= 0 || st.FloodRate < 1 || st.Pace <= 0 || st.MaxInFlight < 1 || st.HeaderTimeout <= 0 || st.BodyTimeout <= 0 ||
				st.ChunkedConns < 0 || st.Unauthenticated < 0 || st.SlowHeaderConns < 1 || st.SlowBodies < 0 || st.ForgedWorkers < 1 || st.HugeWorkers < 0 {
				errs = append(errs, errors.New("STARVE: want a positive duration, flood rate and cap, and attackers"))
			}
			errs = append(errs, st.Victims.validate(Starve))
		case R18:
			s := c.R18
			if s.Duration < minSoak {
				errs = append(errs, fmt.Errorf("R18: the soak must last at least %s (three faults), not %s", minSoak, s.Duration))
			}
			if s.Processes < 1 || s.Tenants < 1 || s.Orders < s.Tenants || s.BurstClients < 1 || s.MaxInFlight < 1 {
				errs = append(errs, errors.New("R18: want at least one process, tenant, order per tenant, burst client and command in flight"))
			}
			if s.LoadFraction <= 0 || s.LoadFraction > 1 {
				errs = append(errs, fmt.Errorf("R18: load fraction %g: want more than 0, at most 1", s.LoadFraction))
			}
			if s.Burst < 0 || s.RequestTimeout <= 0 || s.RetryFor <= 0 || s.Down <= 0 || s.MaxRSSGrowth <= 0 || s.MaxShortRSSGrowth <= 0 || s.MaxGoroutineGrowth < 0 || s.MaxLagP99 <= 0 {
				errs = append(errs, errors.New("R18: want positive durations and targets"))
			}
		}
	}
	return errors.Join(errs...)
}

func (v VictimConfig) validate(id string) error {
	if v.Tenants < 1 || v.Clients < 1 || v.Every <= 0 || v.P99 <= 0 {
		return fmt.Errorf("%s victims: want at least one tenant and client, and positive durations", id)
	}
	return nil
}
