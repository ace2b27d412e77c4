package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// RunnerConfig tunes a Runner. Zero values take the defaults.
type RunnerConfig struct {
	// CatchUpBatch is the batch size while catching up: after a read that
	// returned a full batch, the next reads take up to this many events
	// (default 20 x BatchSize, at most 10,000). Catching up from the start
	// pays per batch (transaction, checkpoint, statements per tenant) and
	// folds more of an order's events into one row change the bigger the
	// batch, so bigger batches go faster (measured 22,800 events/s at 500,
	// 34,700 at 2,000 on 2026-11-29; `strata bench --workloads catchup`
	// on 2026-12-07: 2,000 against 10,000 in docs/benchmarks.md).
	// Live traffic keeps BatchSize, which bounds how long a batch holds the
	// log's horizon for everyone else; a batch that fails is retried at
	// BatchSize.
	CatchUpBatch int
	// BatchSize is the most events read and applied per transaction
	// (default 500; STRATA_PROJECTION_BATCH in serve).
	BatchSize int
	// PollInterval is how often the log is read when nothing wakes the
	// runner (default 1s; STRATA_PROJECTION_POLL in serve).
	PollInterval time.Duration
	// MinRepoll is the first delay before reading again when a wake-up
	// found nothing visible yet, because an older transaction is still
	// open; it doubles up to PollInterval (default 2ms).
	MinRepoll time.Duration
	// Gather is the shortest time between the starts of two batches
	// prompted by wake-ups (default 5ms). Under steady traffic every
	// append wakes the runner; without it each batch would carry one or
	// two events and its fixed cost (transaction, checkpoint, statements
	// per tenant) four projections over. With it, a batch gathers what
	// arrived meanwhile: the command benchmark's throughput with all roles
	// in one process went from 1,600 to ... requests/s. Quiet traffic
	// waits for nothing (the last batch started long ago); busy traffic
	// waits at most Gather. Negative disables.
	Gather time.Duration
	// LogEnd returns the position of the newest event of the log, for the
	// check that the checkpoint is not beyond it (runner_ahead.go). It must
	// cover every committed append (postgres.Store.LastCommitted rather
	// than Head, which stops below an older open transaction). Default:
	// the log's Head.
	LogEnd func(ctx context.Context) (event.Position, error)
	// LeaseRetry is how often a standby runner tries to take the lease
	// (default 3s).
	LeaseRetry time.Duration
	// MinErrorBackoff and MaxErrorBackoff bound the delay before a failed
	// batch is retried (defaults 500ms and 1m).
	MinErrorBackoff, MaxErrorBackoff time.Duration
	// FinishTimeout bounds each batch, from its read to its commit; a
	// shutdown lets the batch in flight finish within it (default 10s).
	FinishTimeout time.Duration
	// PerEvent makes the runner apply every batch event by event even when
	// the projection implements BatchProjection (slower; for tests and for
	// comparing the two paths).
	PerEvent bool
	// StreamCache is how many streams' last versions are remembered for
	// the contiguity check (default 1,024: about 200 bytes each, measured,
	// so 200 KiB per runner). A stream not remembered costs nothing at its
	// version 1 and otherwise a share of one indexed lookup per batch
	// (checkContiguous), so the cache need only hold the streams being
	// written now. 100,000 per runner, an old default, held 20 MiB for each
	// projection; 8,192, the next, still took the soak's new orders (R18)
	// about 18 minutes to fill and was the largest growth of a serving
	// process's heap over that time (+1.6 MiB in 4 minutes, the heap
	// profiles' difference), with every runner and placement holding one.
	StreamCache int
	// Registry decodes payloads. Required: the process's one registry,
	// so that every module's events decode the same way on every path.
	Registry *event.Registry
	// Wake, when set, returns a channel closed when new events may be
	// available (Signal.C). It is taken before each read.
	Wake func() <-chan struct{}
	// Shared, when set, lets runners of this process that catch up from
	// the same position share reads and decoding (see SharedReads). It
	// must decode with Registry (the same *event.Registry): a runner
	// given another is refused rather than left to read alone.
	Shared *SharedReads
	// Progress, when set, is told of every committed checkpoint, so that
	// queries in this process wait for it without polling.
	Progress *Progress
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// DeadLetters turns on the failure policy of ARCHITECTURE decision 5
	// (see FailurePolicy): an event that fails on its own parks its stream
	// in the dead-letter store instead of stopping the projection. Without
	// it a failing event is retried with backoff forever, holding every
	// stream back (and CatchUp returns its *EventError).
	DeadLetters bool
	// Failures tunes the failure policy (defaults: 5 attempts, 200ms
	// doubling to 10s, 20% jitter).
	Failures FailurePolicy
	// Checkpoint is the key of the runner's checkpoint row and lease
	// (default: the projection's name). A rebuild runs a projection into
	// shadow tables under a key of its own; a new projection that reuses
	// another's code needs one too.
	Checkpoint string
	// Filter, when set, limits the events applied to those it accepts;
	// the others advance the checkpoint like events of types the
	// projection does not handle (a rebuild of one tenant).
	Filter func(event.Record) bool
	// Tenant, when set, confines the runner to one tenant's events (a
	// rebuild of one tenant). Where the log can read one tenant's events
	// (eventstore.TenantLog) and no SharedReads is set, the runner reads
	// those alone and moves its checkpoint past the other tenants' events
	// without reading them, so its cost follows the tenant's size;
	// otherwise it reads the global log and skips the others, as Filter
	// does (set both).
	Tenant string
	// Partition, when set, confines the runner to one partition of the
	// projection, which must be Partitionable (issue 35 §5): it reads the
	// partition's streams only (eventstore.PartitionLog, required), under a
	// checkpoint, ledger and lease of its own (PartitionKey). The first
	// partition runner of a layout creates the rows of all its partitions,
	// each split off where the projection stood (ensurePartition). Not with
	// Tenant, Filter, Shared or in a Group.
	Partition eventstore.Partition
	// Share, when set, spreads partitions over the projector processes
	// that share it (one per process): a runner takes its partition's lease
	// only while this process holds fewer than its fair part, and gives it
	// back when it holds more (another process joined).
	Share *Share
	// OnBatch, when set, is called after every committed batch (progress
	// of a rebuild).
	OnBatch func(BatchInfo)
	// AsyncCommit turns synchronous_commit off on the runner's session: a
	// commit does not wait for its WAL flush. A crash may then lose the
	// last batches, but never half a batch (rows and checkpoint commit
	// together), so they are simply applied again: safe for any runner,
	// and what a rebuild uses.
	AsyncCommit bool
}

// BatchInfo describes a committed batch.
type BatchInfo struct {
	// Events is how many events of the log the batch covered (applied,
	// parked or skipped); Checkpoint is where it ended.
	Events     int
	Checkpoint event.Position
	// Parked counts events the batch sent to the dead-letter store.
	Parked int
}

// checkpointKey matches projection_checkpoints.projection.
var checkpointKey = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

func (c *RunnerConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.CatchUpBatch == 0 {
		c.CatchUpBatch = min(20*c.BatchSize, 10_000)
	}
	c.CatchUpBatch = max(c.CatchUpBatch, c.BatchSize)
	def(&c.PollInterval, time.Second)
	def(&c.MinRepoll, 2*time.Millisecond)
	def(&c.Gather, 5*time.Millisecond)
	def(&c.LeaseRetry, 3*time.Second)
	def(&c.MinErrorBackoff, 500*time.Millisecond)
	def(&c.MaxErrorBackoff, time.Minute)
	def(&c.FinishTimeout, 10*time.Second)
	if c.StreamCache == 0 {
		c.StreamCache = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Failures.setDefaults()
}

// Validate reports every invalid setting.
func (c RunnerConfig) Validate() error {
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("batch size %d: want 1 to 10000", c.BatchSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll interval", c.PollInterval}, {"min repoll", c.MinRepoll}, {"lease retry", c.LeaseRetry},
		{"min error backoff", c.MinErrorBackoff}, {"max error backoff", c.MaxErrorBackoff}, {"finish timeout", c.FinishTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
		}
	}
	if c.MaxErrorBackoff < c.MinErrorBackoff {
		errs = append(errs, errors.New("max error backoff is below min error backoff"))
	}
	if c.StreamCache < 1 {
		errs = append(errs, fmt.Errorf("stream cache %d: want at least 1", c.StreamCache))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("registry is required (the process's event registry)"))
	}
	if c.Shared != nil && c.Registry != nil && c.Shared.registry != c.Registry {
		errs = append(errs, errors.New("shared reads decode with another registry than the runner's: build both from the one registry of the process"))
	}
	if c.Checkpoint != "" && !checkpointKey.MatchString(c.Checkpoint) {
		errs = append(errs, fmt.Errorf("checkpoint key %q: want [a-z][a-z0-9_]{0,62}", c.Checkpoint))
	}
	if !c.Partition.IsZero() {
		if err := c.Partition.Validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Tenant != "" || c.Filter != nil || c.Shared != nil {
			errs = append(errs, errors.New("a partition's runner reads its partition alone: no Tenant, Filter or Shared"))
		}
	}
	if err := c.Failures.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
