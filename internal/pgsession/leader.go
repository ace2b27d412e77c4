package pgsession

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrYield is what a Leader's Lead returns to give the lease up on purpose
// (a tool asked for the worker's name): the leader does not back off, it
// says it is paused and looks again.
var ErrYield = errors.New("yielded the lease to a tool")

// ErrShed is what a Leader's Lead returns to give the lease to another
// process on purpose (its share of the work became smaller): the leader
// does not back off, it stands by and asks Admit again.
var ErrShed = errors.New("gave the lease to another process")

// ErrDone is what a Leader's Lead returns to end Run: the lease and the
// session are given back and Run returns nil (a projection group takes the
// worker back onto its own session).
var ErrDone = errors.New("done leading")

// LeaderState is where a Leader stands between two leaderships.
type LeaderState int8

const (
	LeaderStarting LeaderState = iota // connecting, or reconnecting after a lost session
	LeaderStandby                     // another session holds the lease
	LeaderPaused                      // a tool holds the worker's name (Paused said so, or Lead yielded)
)

// Leader is the loop every worker that must be the only one of its name
// runs (the projection runners, the process runners, the relay): take a
// session out of its pool for good, take the lease on it (or wait as a
// standby, trying every Retry), run Lead while the lease is held, give the
// lease and the session back when Lead returns, and start over with
// Backoff unless Lead yielded or ctx ended.
type Leader struct {
	// Lease and Name are the lease taken: Lease.Try(conn, Name).
	Lease Lease
	Name  string
	// Kind names the worker in the log ("projection runner").
	Kind string
	// Connect returns a session that belongs to the worker alone (a pool's
	// connection, hijacked): the lease lives with it.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Paused, when set, is asked before each try for the lease: while it
	// says a tool holds the name, the leader waits PauseRetry and asks
	// again (state LeaderPaused).
	Paused     func(ctx context.Context, conn *pgx.Conn) (bool, error)
	PauseRetry time.Duration
	// Retry is the pause after a failed connection or a lease held by
	// another session.
	Retry time.Duration
	// Admit, when set, is asked before each try for the lease: while it
	// says no (this process holds its share of such leases), the leader
	// stands by without trying, and asks again every Retry. When it said
	// yes and the lease is not taken after all, Unadmit is called.
	Admit   func() bool
	Unadmit func()
	// Lead works while the lease is held. It returns when ctx ends (its
	// value then does not matter), ErrYield to give the lease to a tool,
	// ErrDone to end Run, or the error that cost it the session or the
	// certainty of its lease.
	Lead func(ctx context.Context, conn *pgx.Conn) error
	// OnState, when set, is told each state between leaderships.
	OnState func(LeaderState)
	Logger  *slog.Logger
}

// Run leads until ctx ends; it always returns nil then.
func (l *Leader) Run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() { Close(conn) }()
	state := func(s LeaderState) {
		if l.OnState != nil {
			l.OnState(s)
		}
	}
	var backoff Backoff
	standbyLogged, pausedLogged := false, false
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			Close(conn)
			conn = nil
			c, err := l.Connect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					l.Logger.Warn(l.Kind+" cannot connect; retrying", "error", err.Error(), "retry_in", l.Retry.String())
				}
				Sleep(ctx, l.Retry)
				continue
			}
			conn = c
		}
		var paused bool
		var err error
		if l.Paused != nil {
			paused, err = l.Paused(ctx, conn)
		}
		if err == nil && paused {
			if !pausedLogged {
				l.Logger.Info(l.Kind + " paused: a tool holds it")
				pausedLogged = true
			}
			state(LeaderPaused)
			Sleep(ctx, l.PauseRetry)
			continue
		}
		pausedLogged = false
		if err == nil && l.Admit != nil && !l.Admit() {
			state(LeaderStandby)
			Sleep(ctx, l.Retry)
			continue
		}
		var ok bool
		if err == nil {
			ok, err = l.Lease.Try(ctx, conn, l.Name)
			if !ok && l.Unadmit != nil && l.Admit != nil {
				l.Unadmit()
			}
		}
		if err != nil {
			Close(conn)
			conn = nil
			if ctx.Err() == nil {
				l.Logger.Warn(l.Kind+" cannot take its lease; retrying", "error", err.Error(), "retry_in", l.Retry.String())
			}
			Sleep(ctx, l.Retry)
			continue
		}
		if !ok {
			state(LeaderStandby)
			if !standbyLogged {
				l.Logger.Info(l.Kind+" on standby: another session holds the lease", "retry_every", l.Retry.String())
				standbyLogged = true
			}
			Sleep(ctx, l.Retry)
			continue
		}
		standbyLogged = false
		led := time.Now()
		err = l.Lead(ctx, conn)
		// Ending the session releases the lease whatever state it is in.
		l.Lease.Release(conn, l.Name)
		Close(conn)
		conn = nil
		if ctx.Err() != nil || errors.Is(err, ErrDone) {
			return nil
		}
		if errors.Is(err, ErrShed) {
			l.Logger.Info(l.Kind + " gave its lease to another process (its share of the work became smaller)")
			state(LeaderStandby)
			continue
		}
		if errors.Is(err, ErrYield) {
			// A tool asked for the name: it takes the lease now, and the
			// loop waits above until the tool is done.
			l.Logger.Info(l.Kind + " yielded its lease to a tool")
			state(LeaderPaused)
			continue
		}
		state(LeaderStarting)
		delay := backoff.After(time.Since(led))
		l.Logger.Warn(l.Kind+" lost its session; reconnecting", "error", fmt.Sprint(err), "retry_in", delay.String())
		Sleep(ctx, delay)
	}
	return nil
}
