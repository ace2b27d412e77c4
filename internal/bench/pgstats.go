package bench

import (
	"context"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// resetPGStats clears pg_stat_statements before a workload (Config.PGStats).
func (e *Env) resetPGStats(ctx context.Context) error {
	if e.cfg.PGStats <= 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, e.Server.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

var spaces = regexp.MustCompile(`\s+`)

// printPGStats prints the workload's top statements by total execution
// time, over every database of the server: baselines and strata side by
// side, as they ran.
func (e *Env) printPGStats(ctx context.Context, workload string) error {
	if e.cfg.PGStats <= 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, e.Server.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT calls, total_exec_time, total_exec_time / calls, rows, query
FROM pg_stat_statements
WHERE calls > 0
ORDER BY total_exec_time DESC
LIMIT $1`, e.cfg.PGStats)
	if err != nil {
		return err
	}
	defer rows.Close()
	e.logf("pg_stat_statements, %s: top %d statements by execution time", workload, e.cfg.PGStats)
	e.logf("%10s %10s %9s %10s  %s", "CALLS", "TOTAL ms", "MEAN ms", "ROWS", "STATEMENT")
	for rows.Next() {
		var calls, nrows int64
		var total, mean float64
		var query string
		if err := rows.Scan(&calls, &total, &mean, &nrows, &query); err != nil {
			return err
		}
		query = strings.TrimSpace(spaces.ReplaceAllString(query, " "))
		if len(query) > 100 {
			query = query[:100] + "..."
		}
		e.logf("%10d %10.0f %9.3f %10d  %s", calls, total, mean, nrows, query)
	}
	return rows.Err()
}
