package projectiontest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// Checkpoint reads a projection's checkpoint as a superuser.
func Checkpoint(ctx context.Context, t testing.TB, adminURL, name string) projections.Checkpoint {
	t.Helper()
	conn := connect(ctx, t, adminURL)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET search_path = strata"); err != nil {
		t.Fatal(err)
	}
	cps, err := projections.ReadCheckpoints(ctx, conn, name)
	if err != nil {
		t.Fatal(err)
	}
	return cps[name]
}

// Exec runs statements as a superuser.
func Exec(ctx context.Context, t testing.TB, adminURL string, sqls ...string) {
	t.Helper()
	conn := connect(ctx, t, adminURL)
	defer conn.Close(context.Background())
	for _, s := range sqls {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// Head is the position of the newest event in the log.
func Head(ctx context.Context, t testing.TB, log interface {
	Head(context.Context) (event.Position, error)
}) event.Position {
	t.Helper()
	p, err := log.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func connect(ctx context.Context, t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}
