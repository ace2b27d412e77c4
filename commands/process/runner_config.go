package process

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// RunnerConfig tunes a Runner. Zero values take the defaults.
type RunnerConfig struct {
	// Registry decodes the log's payloads. Required: the process's one
	// registry; it must have a codec for every type the process consumes.
	Registry *event.Registry
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Wake, when set, fires when events were appended (the serve
	// process's append broadcast); without it the log is polled.
	Wake *projections.Signal
	// Now is the clock of deadlines, retries and the times recorded
	// (default time.Now). Tests inject one.
	Now func() time.Time
	// BatchSize is the most log events read and decided per transaction
	// (default 100).
	BatchSize int
	// Poll is how often the log, the outbox and the deadlines are looked
	// at when nothing wakes the runner (default 1s).
	Poll time.Duration
	// LeaseRetry is how often a standby runner tries to take the lease
	// (default 3s).
	LeaseRetry time.Duration
	// Attempts is how often a step is tried before it parks its instance
	// (default 5; 1 parks at the first transient failure).
	Attempts int
	// InitialBackoff and MaxBackoff bound the pause between a step's
	// attempts: doubled after each failure, capped, and scaled by a random
	// factor in [1-Jitter, 1+Jitter] (defaults 200ms, 30s, 0.2; a negative
	// Jitter turns it off).
	InitialBackoff, MaxBackoff time.Duration
	Jitter                     float64
	// StepTimeout bounds one execution of a step (default 30s); running
	// out of it is a transient failure.
	StepTimeout time.Duration
	// Concurrency is how many steps are executed at once (default 4).
	Concurrency int
	// OnStep, when set, is told of every execution of a step (metrics).
	// It is called from the dispatcher's goroutines and must not block.
	OnStep func(StepReport)
	// OnFire, when set, is told of every deadline fired (metrics).
	OnFire func(FireReport)

	hooks *testHooks
}

// StepOutcome is what one execution of a step came to.
type StepOutcome string

const (
	StepOK       StepOutcome = "ok"       // the command applied or the intent succeeded
	StepRejected StepOutcome = "rejected" // a definite refusal
	StepError    StepOutcome = "error"    // a transient failure; retried
	StepParked   StepOutcome = "parked"   // failed past the attempts: the instance is parked
)

// StepReport describes one execution of a step.
type StepReport struct {
	Process  string
	Tenant   string
	Instance string
	Step     string
	Kind     StepKind
	Name     string
	Outcome  StepOutcome
	Attempt  int
	Duration time.Duration
	// Err is the failure (transient or definite), for logs only.
	Err error
}

// FireReport describes one fired deadline. Lag is Fired - Due.
type FireReport struct {
	Process  string
	Tenant   string
	Instance string
	Name     string
	Due      time.Time
	Fired    time.Time
	Lag      time.Duration
}

func (c *RunnerConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	def(&c.Poll, time.Second)
	def(&c.LeaseRetry, 3*time.Second)
	if c.Attempts == 0 {
		c.Attempts = 5
	}
	def(&c.InitialBackoff, 200*time.Millisecond)
	def(&c.MaxBackoff, 30*time.Second)
	if c.Jitter == 0 {
		c.Jitter = 0.2
	}
	def(&c.StepTimeout, 30*time.Second)
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
}

// Validate reports every invalid setting.
func (c RunnerConfig) Validate() error {
	var errs []error
	if c.Registry == nil {
		errs = append(errs, errors.New("registry is required (the process's event registry)"))
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("batch size %d: want 1 to 10000", c.BatchSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll", c.Poll}, {"lease retry", c.LeaseRetry}, {"initial backoff", c.InitialBackoff},
		{"max backoff", c.MaxBackoff}, {"step timeout", c.StepTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if c.MaxBackoff < c.InitialBackoff {
		errs = append(errs, errors.New("max backoff is below initial backoff"))
	}
	if c.Attempts < 1 || c.Attempts > 1000 {
		errs = append(errs, fmt.Errorf("attempts %d: want 1 to 1000", c.Attempts))
	}
	if c.Jitter >= 1 {
		errs = append(errs, fmt.Errorf("jitter %g: want below 1", c.Jitter))
	}
	if c.Concurrency < 1 || c.Concurrency > 256 {
		errs = append(errs, fmt.Errorf("concurrency %d: want 1 to 256", c.Concurrency))
	}
	return errors.Join(errs...)
}

// backoff is the pause after failed attempt number attempt (1-based).
func (c RunnerConfig) backoff(attempt int) time.Duration {
	d := c.InitialBackoff
	for i := 1; i < attempt && d < c.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.MaxBackoff)
	if c.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - c.Jitter + 2*c.Jitter*rand.Float64()))
	}
	return max(d, time.Millisecond)
}

// testHooks let the package's tests stop the runtime at the points whose
// atomicity they prove. nil in production.
type testHooks struct {
	// beforeCommit is called with "batch", "outcome" or "fire" after a
	// transaction's writes and before its COMMIT; an error rolls it back.
	beforeCommit func(what string) error
	// afterExecute is called after a step's execution returned and before
	// its outcome is recorded; an error drops the outcome (as a crash
	// there would).
	afterExecute func(tenant, instance, step string) error
}
