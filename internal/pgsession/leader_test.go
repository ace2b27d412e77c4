package pgsession

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

// leaderProbe is a worker run by a Leader: it records its states and its
// leaderships, and leads until told to stop with an error (or to yield).
type leaderProbe struct {
	mu      sync.Mutex
	states  []LeaderState
	leading atomic.Bool
	led     atomic.Int32
	end     chan error // what the current leadership returns
}

func (p *leaderProbe) state(s LeaderState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.states = append(p.states, s)
}

func (p *leaderProbe) saw(s LeaderState) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.states {
		if x == s {
			return true
		}
	}
	return false
}

func (p *leaderProbe) lead(ctx context.Context, conn *pgx.Conn) error {
	p.led.Add(1)
	p.leading.Store(true)
	defer p.leading.Store(false)
	select {
	case <-ctx.Done():
		return nil
	case err := <-p.end:
		return err
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaderOneLeadsOthersStandBy: two leaders of one name; one leads, the
// other stands by. When the leadership ends with an error (a lost
// session), the lease goes with the session and the standby takes over;
// when it yields, the leader says it is paused and leads again as soon as
// Paused lets it, without a backoff.
func TestLeaderOneLeadsOthersStandBy(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var held atomic.Bool // a tool holds the name
	newLeader := func(p *leaderProbe) *Leader {
		return &Leader{Lease: Lease{Class: 0x54455354, Namespace: "test"}, Name: "worker", Kind: "test worker",
			Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) },
			Paused:  func(context.Context, *pgx.Conn) (bool, error) { return held.Load(), nil }, PauseRetry: 10 * time.Millisecond,
			Retry: 20 * time.Millisecond, Lead: p.lead, OnState: p.state, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	a, b := &leaderProbe{end: make(chan error)}, &leaderProbe{end: make(chan error)}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range []*leaderProbe{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = newLeader(p).Run(lctx) }()
	}
	waitUntil(t, "one leader", func() bool { return a.leading.Load() != b.leading.Load() })
	first, second := a, b
	if b.leading.Load() {
		first, second = b, a
	}
	waitUntil(t, "the other on standby", func() bool { return second.saw(LeaderStandby) })
	if second.led.Load() != 0 {
		t.Fatal("both leaders led at once")
	}

	first.end <- errors.New("session lost")
	waitUntil(t, "the standby leading", func() bool { return second.leading.Load() })
	if !first.saw(LeaderStarting) {
		t.Error("the leader whose session was lost did not say it was starting again")
	}

	held.Store(true)
	second.end <- ErrYield
	waitUntil(t, "the yielding leader paused", func() bool { return second.saw(LeaderPaused) })
	time.Sleep(100 * time.Millisecond)
	if first.leading.Load() || second.leading.Load() {
		t.Fatal("a leader led while a tool held the name")
	}
	held.Store(false)
	waitUntil(t, "a leader again once the tool is done", func() bool { return first.leading.Load() || second.leading.Load() })

	stop()
	wg.Wait()
	if first.leading.Load() || second.leading.Load() {
		t.Error("a leadership outlived Run")
	}
}
