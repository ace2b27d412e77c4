package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/testdb"
)

// setSyncStandby names the synchronous standby of the cluster at url (""
// for none) and waits until a new session sees it. Naming one that never
// connects makes every commit wait for it after it is flushed locally, as
// on a primary whose synchronous standby was just promoted away from it or
// one just promoted whose standbys have not connected yet.
func setSyncStandby(t *testing.T, url, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	stmt := "ALTER SYSTEM SET synchronous_standby_names = '" + name + "'"
	if name == "" {
		stmt = "ALTER SYSTEM RESET synchronous_standby_names"
	}
	for _, q := range []string{stmt, "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = c.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&got)
		c.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got == name {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if name == "" {
		return
	}
	// A session sees the setting before commits wait on it: the
	// checkpointer publishes that a synchronous standby is named when it
	// has read the new configuration. Probe until a commit waits.
	for {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Exec(pctx, "CREATE TEMP TABLE sync_probe (x int)") // catalog rows: WAL, hence a commit that waits
		cancel()
		c.Close(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal("commits never began to wait for the synchronous standby")
			}
			return // the probe's commit waited: the setting is in force
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplayWaitsUntilTheRecordIsDurable: a command's first attempt
// commits while its synchronous standby does not answer, and its client
// gives up. pgx then cancels the wait (a cancel request as it closes the
// connection), and PostgreSQL keeps the commit, locally only, visible to
// every session. The retry finds the idempotency record; it must not
// answer from it until the record is durable, or a failover before it is
// replicated loses a command strata acknowledged (FAILOVER in make chaos
// saw such cancelled waits on a newly promoted primary).
func TestReplayWaitsUntilTheRecordIsDurable(t *testing.T) {
	p := testdb.NewPrivate(t, nil)
	s := New(p.App, p.Projector)
	ctx := context.Background()
	if err := s.SaveIdempotency(ctx, "t-a", "k-durable", "h1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	setSyncStandby(t, p.AdminURL, "nobody")
	restored := false
	defer func() {
		if !restored {
			setSyncStandby(t, p.AdminURL, "")
		}
	}()

	// The first attempt: its client gives up while the commit waits.
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := s.SaveIdempotency(sctx, "t-a", "k-cancelled", "h2", []byte(`{"v":2}`))
	cancel()
	if err == nil {
		t.Fatal("the commit did not wait for the synchronous standby")
	}
	// pgx's cancel request reaches the backend asynchronously: wait
	// until the record is visible (the superuser reads past RLS).
	admin, err := pgx.Connect(ctx, p.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.idempotency_keys WHERE key = 'k-cancelled'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancelled commit did not become visible within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The retry finds it: no answer from it while it is not durable (an
	// error, which the handler answers with 503), never the record.
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	rec, found, err := s.LookupIdempotency(lctx, "t-a", "k-cancelled")
	cancel()
	if err == nil || found {
		t.Fatalf("a record not yet durable was answered: found %v %s, err %v", found, rec.Response, err)
	}
	// A missing key is answered at once: nothing to answer from.
	lctx, cancel = context.WithTimeout(ctx, time.Second)
	_, found, err = s.LookupIdempotency(lctx, "t-a", "k-missing")
	cancel()
	if err != nil || found {
		t.Fatalf("a missing key while the standby does not answer: found %v, err %v", found, err)
	}

	// Once commits are durable again (here: no synchronous standby any
	// more), the retry gets the record.
	setSyncStandby(t, p.AdminURL, "")
	restored = true
	for _, key := range []string{"k-cancelled", "k-durable"} {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rec, found, err := s.LookupIdempotency(lctx, "t-a", key)
		cancel()
		if err != nil || !found {
			t.Fatalf("%s once durable: found %v, err %v", key, found, err)
		}
		t.Logf("%s: %s", key, rec.Response)
	}
}
