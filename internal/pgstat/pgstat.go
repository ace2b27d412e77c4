// Package pgstat reads PostgreSQL's pg_stat_statements for the benchmarks
// and throughput tests: where the server's time went, next to the
// throughput it explains. The server must preload the module
// (shared_preload_libraries=pg_stat_statements).
package pgstat

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Reset creates the extension in conn's database if needed and clears the
// statistics of every database.
func Reset(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	return nil
}

var spaces = regexp.MustCompile(`\s+`)

// Top returns the n statements that took the most execution time, over
// every database, as a table: a header line, then one line per statement
// (calls, total and mean time, rows, the statement shortened to one line).
func Top(ctx context.Context, conn *pgx.Conn, n int) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT calls, total_exec_time, total_exec_time / calls, rows, query
FROM pg_stat_statements
WHERE calls > 0
ORDER BY total_exec_time DESC
LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := []string{fmt.Sprintf("%10s %10s %9s %10s  %s", "CALLS", "TOTAL ms", "MEAN ms", "ROWS", "STATEMENT")}
	for rows.Next() {
		var calls, nrows int64
		var total, mean float64
		var query string
		if err := rows.Scan(&calls, &total, &mean, &nrows, &query); err != nil {
			return nil, err
		}
		query = strings.TrimSpace(spaces.ReplaceAllString(query, " "))
		if len(query) > 100 {
			query = query[:100] + "..."
		}
		out = append(out, fmt.Sprintf("%10d %10.0f %9.3f %10d  %s", calls, total, mean, nrows, query))
	}
	return out, rows.Err()
}
