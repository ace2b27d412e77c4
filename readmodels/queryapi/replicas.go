package queryapi

// Query replicas (STRATA_QUERY_DATABASE_URL; docs/scaling.md, "Query
// replicas"): the query role's reads go to PostgreSQL streaming replicas
// without giving up read-your-writes.
//
// A ReplicaSet watches each replica: how far its replay is behind the
// primary (in bytes, and in seconds estimated from the primary's WAL
// position sampled over time), whether its replay is paused, whether it
// answers. Pick chooses a usable replica round-robin. A query carrying a
// consistency token waits on the replica it was given for the replica's
// own copy of the projection checkpoints (Replica.WaitGated): a checkpoint
// and the read-model rows it covers commit in one transaction, so a
// replica that has replayed the checkpoint has replayed the rows, and the
// read that follows on the same replica sees them. The API falls back to
// the primary when no replica is usable or the replica has not replayed
// the token within the staleness budget; it never answers from a replica
// that has not.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// ReplicaConfig configures a ReplicaSet. Zero values take the defaults.
type ReplicaConfig struct {
	// Primary is a pool on the primary (any strata role): the monitor reads
	// its WAL position to measure the replicas' lag.
	Primary *pgxpool.Pool
	// MaxLag is the most a replica may be behind to serve reads (default
	// 10s); beyond it, or unreachable, a replica is not picked.
	MaxLag time.Duration
	// Interval is how often each replica is sampled (default 500ms).
	Interval time.Duration
	// Logger reports a replica becoming unusable or usable again.
	Logger *slog.Logger
	// OnSample, if set, receives every sample (metrics).
	OnSample func(ReplicaSample)
}

// ReplicaSample is one look at a replica.
type ReplicaSample struct {
	Name string `json:"name"`
	// State: "streaming", "paused" (replay paused: pg_wal_replay_pause),
	// "lagging" (beyond MaxLag), "not_a_replica" (not in recovery: promoted,
	// or a primary configured by mistake), "unreachable", or "unknown"
	// before the first sample.
	State string `json:"state"`
	// LagBytes is how much WAL the primary had written that the replica had
	// not replayed, when sampled.
	LagBytes int64 `json:"lag_bytes"`
	// LagSeconds estimates how old the newest data on the replica is: how
	// long ago the primary's WAL passed the replica's replay position,
	// interpolated between the primary's sampled positions (0 when the
	// replica had replayed all the primary had written when sampled just
	// before it).
	LagSeconds float64   `json:"lag_seconds"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
}

// Usable reports whether the replica may serve reads without a token.
func (s ReplicaSample) Usable() bool { return s.State == StateStreaming || s.State == StatePaused }

// States of a replica.
const (
	StateUnknown     = "unknown"
	StateStreaming   = "streaming"
	StatePaused      = "paused"
	StateLagging     = "lagging"
	StateNotReplica  = "not_a_replica"
	StateUnreachable = "unreachable"
)

// Replica is one streaming replica.
type Replica struct {
	name string
	pool *pgxpool.Pool
	wait *projections.Consistency
	last atomic.Pointer[ReplicaSample]
}

// Name is the replica's name in metrics, logs and headers (its host:port).
func (r *Replica) Name() string { return r.name }

// Pool is the replica's pool (db.RoleApp).
func (r *Replica) Pool() *pgxpool.Pool { return r.pool }

// Last is the replica's latest sample.
func (r *Replica) Last() ReplicaSample { return *r.last.Load() }

// WaitGated waits, as projections.Consistency.WaitGated does, for the
// replica's own copy of the checkpoints to reach pos.
func (r *Replica) WaitGated(ctx context.Context, wait time.Duration, pos event.Position, gate projections.Gate, names ...string) error {
	return r.wait.WaitGated(ctx, wait, pos, gate, names...)
}

// ReplicaSet is the query role's replicas and their monitor.
type ReplicaSet struct {
	cfg      ReplicaConfig
	replicas []*Replica
	next     atomic.Uint64

	mu      sync.Mutex
	primary []lsnAt // the primary's WAL position over the last MaxLag and more
}

type lsnAt struct {
	lsn uint64
	at  time.Time
}

// NamedPool is a replica's pool and the name it goes by.
type NamedPool struct {
	Name string
	Pool *pgxpool.Pool
}

// NewReplicaSet returns a ReplicaSet over pools (each running as db.RoleApp on a replica).
// Its replicas are unusable until Run has sampled them.
func NewReplicaSet(cfg ReplicaConfig, pools ...NamedPool) *ReplicaSet {
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = 10 * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &ReplicaSet{cfg: cfg}
	for _, p := range pools {
		r := &Replica{name: p.Name, pool: p.Pool, wait: projections.NewConsistency(p.Pool, nil)}
		r.last.Store(&ReplicaSample{Name: p.Name, State: StateUnknown})
		s.replicas = append(s.replicas, r)
	}
	return s
}

// Replicas lists the replicas in configuration order.
func (s *ReplicaSet) Replicas() []*Replica { return s.replicas }

// Samples returns every replica's latest sample.
func (s *ReplicaSet) Samples() []ReplicaSample {
	out := make([]ReplicaSample, len(s.replicas))
	for i, r := range s.replicas {
		out[i] = r.Last()
	}
	return out
}

// Pick returns a usable replica, round-robin, or nil when none is. For a
// read with a consistency token (token true) a paused replica is passed
// over: its replay will not reach the token while it stays paused.
func (s *ReplicaSet) Pick(token bool) *Replica {
	n := uint64(len(s.replicas))
	start := s.next.Add(1)
	for i := uint64(0); i < n; i++ {
		r := s.replicas[(start+i)%n]
		last := r.Last()
		if last.State == StateStreaming || last.State == StatePaused && !token {
			return r
		}
	}
	return nil
}

// Run samples every replica each Interval until ctx ends.
func (s *ReplicaSet) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.SampleNow(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SampleNow samples the primary's WAL position, then every replica.
func (s *ReplicaSet) SampleNow(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, time.Second))
	defer cancel()
	primary, perr := s.samplePrimary(ctx)
	var wg sync.WaitGroup
	for _, r := range s.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			smp := s.sample(ctx, r, primary, perr)
			if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
				return // shutting down: keep the last real sample
			}
			prev := r.last.Swap(&smp)
			if prev.Usable() != smp.Usable() && prev.State != StateUnknown || prev.State == StateUnknown && !smp.Usable() {
				s.cfg.Logger.Warn("query replica state", "replica", r.name, "state", smp.State, "lag_seconds", smp.LagSeconds, "error", smp.Error)
			}
			if s.cfg.OnSample != nil {
				s.cfg.OnSample(smp)
			}
		}()
	}
	wg.Wait()
}

// samplePrimary reads the primary's WAL position and keeps it in the
// history the lag in seconds is read from.
func (s *ReplicaSet) samplePrimary(ctx context.Context) (uint64, error) {
	var text string
	if err := s.cfg.Primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		return 0, err
	}
	lsn, err := ParseLSN(text)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.primary = append(s.primary, lsnAt{lsn: lsn, at: now})
	// Keep what covers 2 x MaxLag, and always the oldest sample inside it.
	cut := 0
	for cut < len(s.primary)-1 && now.Sub(s.primary[cut+1].at) > 2*s.cfg.MaxLag {
		cut++
	}
	s.primary = s.primary[cut:]
	return lsn, nil
}

// lagSince estimates how long ago the primary's WAL passed replayed: between
// the last sample at or below it and the next, interpolated by WAL
// position (the primary writes WAL about evenly over such a short span).
// It returns false when the primary was past replayed in every sample
// kept, and then the age of the oldest: a lower bound.
func (s *ReplicaSet) lagSince(replayed uint64, now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.primary) - 1; i >= 0; i-- {
		below := s.primary[i]
		if below.lsn > replayed {
			continue
		}
		if i == len(s.primary)-1 {
			return 0, true
		}
		above := s.primary[i+1]
		frac := float64(replayed-below.lsn) / float64(above.lsn-below.lsn)
		passed := below.at.Add(time.Duration(frac * float64(above.at.Sub(below.at))))
		return max(now.Sub(passed), 0), true
	}
	if len(s.primary) == 0 {
		return 0, false
	}
	return now.Sub(s.primary[0].at), false
}

func (s *ReplicaSet) sample(ctx context.Context, r *Replica, primary uint64, primaryErr error) ReplicaSample {
	smp := ReplicaSample{Name: r.name, At: time.Now()}
	var inRecovery, paused bool
	var replayText string
	err := r.pool.QueryRow(ctx, `SELECT pg_is_in_recovery(),
       pg_is_in_recovery() AND pg_get_wal_replay_pause_state() <> 'not paused',
       coalesce(pg_last_wal_replay_lsn()::text, '')`).Scan(&inRecovery, &paused, &replayText)
	if err != nil {
		smp.State, smp.Error = StateUnreachable, "the replica does not answer"
		return smp
	}
	if !inRecovery {
		smp.State = StateNotReplica
		smp.Error = "not in recovery: promoted, or not a replica; not used"
		return smp
	}
	if primaryErr != nil {
		// Without the primary's position the lag is unknown: a replica
		// whose primary is out of reach may be arbitrarily stale.
		smp.State, smp.Error = StateLagging, "the primary's WAL position cannot be read"
		return smp
	}
	replayed, err := ParseLSN(replayText)
	if err != nil {
		smp.State, smp.Error = StateLagging, "no replay position yet"
		return smp
	}
	if primary > replayed {
		smp.LagBytes = int64(primary - replayed)
		since, within := s.lagSince(replayed, smp.At)
		smp.LagSeconds = since.Seconds()
		if !within {
			smp.LagSeconds = max(smp.LagSeconds, 2*s.cfg.MaxLag.Seconds())
		}
	}
	switch {
	case smp.LagSeconds > s.cfg.MaxLag.Seconds():
		smp.State = StateLagging
	case paused:
		smp.State = StatePaused
	default:
		smp.State = StateStreaming
	}
	return smp
}

// ParseLSN parses PostgreSQL's text form of a WAL position ("16/B374D848").
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("WAL position %q: want X/Y", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("WAL position %q: want hexadecimal X/Y", s)
	}
	return h<<32 | l, nil
}
