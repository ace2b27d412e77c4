package projections

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/internal/pgsession"
)

// memberClass is the class of the advisory lock each projector process
// sharing partitions holds while it lives (Share.Run): pg_locks counts the
// members, and a member that dies (its session gone) stops counting at
// once, as its partitions' leases go.
const memberClass int32 = 0x5354524d // "STRM"

// Share spreads the partitions of partitioned projections over the
// projector processes of a database, one Share per process: each process
// holds at most its fair part of a projection's partitions, the count
// divided by the number of members, rounded up. A process that joins makes
// the others' parts smaller: each gives back what it holds beyond its part
// (its runner finishes its batch and releases the lease), and the joining
// one takes them at its next lease retry. A process that dies makes the
// others' parts larger, and its partitions' leases, gone with its sessions,
// are taken by the others. Which process runs which partition is left to
// the leases; only how many is shared.
type Share struct {
	pool    *pgxpool.Pool
	logger  *slog.Logger
	refresh time.Duration

	mu      sync.Mutex
	members int            // as last counted, at least 1
	held    map[string]int // partitions held in this process, by projection
	counted chan struct{}  // closed at the first count
	first   sync.Once
}

// NewShare returns the share of this process; Run must run for it to count
// the members (until then the process counts itself alone). pool runs as
// db.RoleProjector; Run holds one of its connections.
func NewShare(pool *pgxpool.Pool, logger *slog.Logger) *Share {
	if logger == nil {
		logger = slog.Default()
	}
	return &Share{pool: pool, logger: logger, refresh: time.Second, members: 1, held: map[string]int{}, counted: make(chan struct{})}
}

// Members returns the number of projector processes sharing partitions,
// as last counted.
func (s *Share) Members() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members
}

// Held returns how many partitions of the projection this process holds.
func (s *Share) Held(projection string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[projection]
}

func (s *Share) fair(count int) int { return (count + s.members - 1) / s.members }

// admit reports whether this process may take one more partition of the
// projection (of count), and counts it taken when it may: a runner that
// then fails to take the lease gives it back (give). Admission and count
// are one step, so that of several runners asking at once only as many
// as the part allows try for a lease.
func (s *Share) admit(projection string, count int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[projection] >= s.fair(count) {
		return false
	}
	s.held[projection]++
	return true
}

// give counts a partition given back (or not taken after all).
func (s *Share) give(projection string) {
	s.mu.Lock()
	s.held[projection]--
	s.mu.Unlock()
}

// shed reports whether this process holds more partitions of the
// projection than its part; when it does, it counts one given back at
// once, so that of several runners asking only as many as needed let go.
func (s *Share) shed(projection string, count int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[projection] <= s.fair(count) {
		return false
	}
	s.held[projection]--
	return true
}

// Run holds this process's member lock and counts the members every
// second until ctx ends; it returns nil then. Through an outage it keeps
// the last count and retries.
func (s *Share) Run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() { pgsession.Close(conn) }()
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			pgsession.Close(conn)
			conn = nil
			c, err := s.join(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("partition share: cannot join; retrying", "error", err.Error())
				}
				pgsession.Sleep(ctx, s.refresh)
				continue
			}
			conn = c
		}
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::int::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, memberClass).Scan(&n)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("partition share: cannot count the members; retrying", "error", err.Error())
			}
			pgsession.Close(conn)
			conn = nil
		} else {
			s.mu.Lock()
			if n != s.members {
				s.logger.Info("partition share: projector processes", "members", max(n, 1), "were", s.members)
			}
			s.members = max(n, 1)
			s.mu.Unlock()
			s.first.Do(func() { close(s.counted) })
		}
		pgsession.Sleep(ctx, s.refresh)
	}
	return nil
}

// Counted returns a channel closed once Run has counted the members.
func (s *Share) Counted() <-chan struct{} { return s.counted }

// join takes a session and a member lock of a key of its own on it.
func (s *Share) join(ctx context.Context) (*pgx.Conn, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	conn := c.Hijack()
	for range 8 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			pgsession.Close(conn)
			return nil, err
		}
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, memberClass, int32(binary.BigEndian.Uint32(b[:]))).Scan(&ok); err != nil {
			pgsession.Close(conn)
			return nil, err
		}
		if ok {
			return conn, nil
		}
	}
	pgsession.Close(conn)
	return nil, errors.New("no free member key after 8 tries")
}
