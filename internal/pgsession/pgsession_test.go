package pgsession

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestKeysAreStable pins the keys: processes of two releases run side by
// side during a rolling deploy, and must agree on who holds a lease.
func TestKeysAreStable(t *testing.T) {
	for _, c := range []struct {
		lease Lease
		name  string
		want  int32
	}{
		{Lease{0x53545250, "strata-projection"}, "order_details", 1427787431},
		{Lease{0x5354524C, "strata-relay"}, "relay_strata.events", 1353999346},
	} {
		if got := c.lease.Key(c.name); got != c.want {
			t.Errorf("%s key of %q = %d, want %d", c.lease.Namespace, c.name, got, c.want)
		}
	}
	a, b := Lease{1, "a"}, Lease{1, "b"}
	if a.Key("x") == b.Key("x") {
		t.Errorf("namespaces a and b map x onto the same key")
	}
}

// TestLeaseIsExclusiveAndReleased: one session holds a name's lease; the
// next gets it once the holder releases it, or once its session ends.
func TestLeaseIsExclusiveAndReleased(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Close(c) })
		return c
	}
	l := Lease{Class: 0x54455354, Namespace: "test"}
	first, second := connect(), connect()
	try := func(c *pgx.Conn, name string, want bool) {
		t.Helper()
		got, err := l.Try(ctx, c, name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("Try(%q) = %v, want %v", name, got, want)
		}
	}
	try(first, "p", true)
	try(second, "p", false)
	try(second, "q", true) // another name is another lease
	l.Release(first, "p")
	try(second, "p", true)
	try(first, "p", false)
	// The holder's session ends: the server lets the lock go once its
	// backend has exited, which happens after the client hangs up (the
	// backend releases its locks before it leaves pg_stat_activity).
	pid := second.PgConn().PID()
	Close(second)
	for {
		var alive bool
		if err := first.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, int32(pid)).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		if !Sleep(ctx, 10*time.Millisecond) {
			t.Fatalf("the closed session's backend (pid %d) is still there", pid)
		}
	}
	try(first, "p", true)
	l.Release(nil, "p") // harmless
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Errorf("Sleep without cancellation reported a cut-short wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Errorf("Sleep on a cancelled context reported the full wait")
	}
	if time.Since(start) > time.Second {
		t.Errorf("Sleep on a cancelled context took %v", time.Since(start))
	}
}

func TestBackoff(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for range 11 {
		got = append(got, b.After(time.Second))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond,
		25600 * time.Millisecond, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("pauses after short sessions = %v, want %v", got, want)
	}
	if d := b.After(11 * time.Second); d != 100*time.Millisecond {
		t.Errorf("pause after a session that lasted = %v, want 100ms", d)
	}
	if d := b.After(time.Second); d != 200*time.Millisecond {
		t.Errorf("pause after the next short session = %v, want 200ms", d)
	}
}
