package bench

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgstat"
)

// withStats runs f on a superuser connection when Config.PGStats is set.
func (e *Env) withStats(ctx context.Context, f func(conn *pgx.Conn) error) error {
	if e.cfg.PGStats <= 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, e.Server.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return f(conn)
}

// resetPGStats clears pg_stat_statements before a workload.
func (e *Env) resetPGStats(ctx context.Context) error {
	return e.withStats(ctx, func(conn *pgx.Conn) error { return pgstat.Reset(ctx, conn) })
}

// printPGStats prints the workload's top statements by execution time,
// over every database of the server: baselines and strata side by side.
func (e *Env) printPGStats(ctx context.Context, workload string) error {
	return e.withStats(ctx, func(conn *pgx.Conn) error {
		lines, err := pgstat.Top(ctx, conn, e.cfg.PGStats)
		if err != nil {
			return err
		}
		e.logf("pg_stat_statements, %s: top %d statements by execution time", workload, e.cfg.PGStats)
		for _, l := range lines {
			e.logf("%s", l)
		}
		return nil
	})
}
