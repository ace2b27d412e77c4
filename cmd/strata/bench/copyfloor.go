package bench

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples"
)

// copyFloor is the least a rebuild can cost (issue 35 §1): the final rows
// of every projection's tables, as the rebuild left them, written once by
// COPY into fresh tables of the same columns, then the same indexes built
// on them; the tables are copied concurrently on 4 connections, as the
// rebuild runs 4 workers. Reading the rows out is not timed. It returns
// the time and how many rows were written.
func copyFloor(ctx context.Context, url string) (time.Duration, int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	type table struct {
		name    string
		rows    bytes.Buffer
		indexes []string
	}
	var tables []*table
	var total int64
	for _, name := range examples.All().Tables() {
		t := &table{name: name}
		tag, err := conn.PgConn().CopyTo(ctx, &t.rows, "COPY strata."+pgx.Identifier{name}.Sanitize()+" TO STDOUT (FORMAT binary)")
		if err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", name, err)
		}
		total += tag.RowsAffected()
		rows, err := conn.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'strata' AND tablename = $1 ORDER BY indexname`, name)
		if err != nil {
			return 0, 0, err
		}
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return 0, 0, err
		}
		for _, d := range defs {
			m := indexDef.FindStringSubmatch(d)
			if m == nil {
				return 0, 0, fmt.Errorf("index of %s: cannot read %q", name, d)
			}
			idx := "floor_" + m[2]
			if len(idx) > 63 {
				idx = idx[:63]
			}
			t.indexes = append(t.indexes, fmt.Sprintf("CREATE %sINDEX %s ON public.%s %s", m[1], pgx.Identifier{idx}.Sanitize(),
				pgx.Identifier{"floor_" + name}.Sanitize(), m[3]))
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS public.%[1]s; CREATE TABLE public.%[1]s (LIKE strata.%[2]s INCLUDING DEFAULTS)",
			pgx.Identifier{"floor_" + name}.Sanitize(), pgx.Identifier{name}.Sanitize())); err != nil {
			return 0, 0, err
		}
		tables = append(tables, t)
	}
	defer func() {
		for _, t := range tables {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS public."+pgx.Identifier{"floor_" + t.name}.Sanitize())
		}
	}()
	work := make(chan *table, len(tables))
	for _, t := range tables {
		work <- t
	}
	close(work)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	began := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(ctx)
			for t := range work {
				if _, err := c.PgConn().CopyFrom(ctx, bytes.NewReader(t.rows.Bytes()),
					"COPY public."+pgx.Identifier{"floor_" + t.name}.Sanitize()+" FROM STDIN (FORMAT binary)"); err != nil {
					errs <- fmt.Errorf("copy %s: %w", t.name, err)
					return
				}
				for _, ix := range t.indexes {
					if _, err := c.Exec(ctx, ix); err != nil {
						errs <- fmt.Errorf("index of %s: %w", t.name, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(began)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return d, total, nil
}

// indexDef reads pg_indexes.indexdef: CREATE [UNIQUE ]INDEX name ON table rest.
var indexDef = regexp.MustCompile(`^CREATE (UNIQUE )?INDEX (\S+) ON \S+ (.*)$`)
