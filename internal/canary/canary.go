// Package canary looks for a marker in every table of a schema: the proof
// that an erased tenant left nothing behind is a marker placed in its data
// beforehand and found nowhere afterwards, whatever table, column or type
// it would be in (issue 29: an inventory that is only as good as its list
// of tables let an export's archive survive an erasure). Tests and the
// fault harness (cmd/chaos) use it. It may import pgx, nothing of strata.
package canary

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Find is where the marker was found.
type Find struct {
	Table  string
	Column string // "" when the row's text as a whole matched and no single column did
	Rows   int64
	// Gzip is set when the marker was inside gzip'd bytes (an export's
	// archive), found by decompressing them.
	Gzip bool
}

func (f Find) String() string {
	where := f.Table
	if f.Column != "" {
		where += "." + f.Column
	}
	if f.Gzip {
		where += " (inside gzip'd bytes)"
	}
	return fmt.Sprintf("%s: %d rows", where, f.Rows)
}

// gzipMagic starts every gzip stream.
var gzipMagic = []byte{0x1f, 0x8b}

// MaxInflate bounds how much of one gzip'd value is decompressed.
const MaxInflate = 256 << 20

// Scan returns every table and column of schema whose rows hold marker,
// read through conn. conn must see every row: a superuser's session, or a
// role with BYPASSRLS (row-level security would hide other tenants' rows,
// and the table owner's own FORCE'd policies would hide them all).
//
// Every ordinary and partitioned table is read whole, as text (the row's
// text form, so every column of every type: text, json, jsonb, arrays,
// composites), and every bytea column as bytes; a bytea value that starts
// with the gzip magic is decompressed (up to MaxInflate; a stream cut
// short, like the first 1 MiB chunk of an export's archive, is read as far
// as it goes) and searched too. Later chunks of a gzip stream cut into
// rows cannot be decompressed on their own: count such rows explicitly.
func Scan(ctx context.Context, conn *pgx.Conn, schema, marker string) ([]Find, error) {
	if marker == "" {
		return nil, errors.New("canary: an empty marker matches everything")
	}
	rows, err := conn.Query(ctx, `
SELECT c.relname, a.attname, t.typname = 'bytea'
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname, a.attnum`, schema)
	if err != nil {
		return nil, fmt.Errorf("canary: read the catalog: %w", err)
	}
	type col struct {
		table, name string
		bytea       bool
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		return c, r.Scan(&c.table, &c.name, &c.bytea)
	})
	if err != nil {
		return nil, fmt.Errorf("canary: read the catalog: %w", err)
	}
	byTable := map[string][]col{}
	var tables []string
	for _, c := range cols {
		if _, ok := byTable[c.table]; !ok {
			tables = append(tables, c.table)
		}
		byTable[c.table] = append(byTable[c.table], c)
	}
	sort.Strings(tables)
	var out []Find
	for _, table := range tables {
		ident := pgx.Identifier{schema, table}.Sanitize()
		// The row's text: every column but bytea, whose text form is hex.
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+` x WHERE strpos(x::text, $1) > 0`, marker).Scan(&n); err != nil {
			return nil, fmt.Errorf("canary: scan %s: %w", table, err)
		}
		found := false
		for _, c := range byTable[table] {
			cid := pgx.Identifier{c.name}.Sanitize()
			var m int64
			var err error
			if c.bytea {
				err = conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+` WHERE position(convert_to($1, 'UTF8') IN `+cid+`) > 0`, marker).Scan(&m)
			} else if n > 0 {
				err = conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+` WHERE strpos(`+cid+`::text, $1) > 0`, marker).Scan(&m)
			}
			if err != nil {
				return nil, fmt.Errorf("canary: scan %s.%s: %w", table, c.name, err)
			}
			if m > 0 {
				out = append(out, Find{Table: table, Column: c.name, Rows: m})
				found = true
			}
			if c.bytea {
				g, err := scanGzip(ctx, conn, ident, cid, marker)
				if err != nil {
					return nil, fmt.Errorf("canary: scan %s.%s: %w", table, c.name, err)
				}
				if g > 0 {
					out = append(out, Find{Table: table, Column: c.name, Rows: g, Gzip: true})
					found = true
				}
			}
		}
		if n > 0 && !found {
			out = append(out, Find{Table: table, Rows: n})
		}
	}
	return out, nil
}

// scanGzip counts the rows whose bytea column holds gzip'd bytes that
// decompress to something holding marker.
func scanGzip(ctx context.Context, conn *pgx.Conn, table, column, marker string) (int64, error) {
	rows, err := conn.Query(ctx, `SELECT `+column+` FROM `+table+` WHERE substring(`+column+` FROM 1 FOR 2) = $1`, gzipMagic)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return 0, err
		}
		if inflated(raw, []byte(marker)) {
			n++
		}
	}
	return n, rows.Err()
}

// inflated reports whether the gzip stream raw (perhaps cut short)
// decompresses to bytes holding marker.
func inflated(raw, marker []byte) bool {
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return false
	}
	zr.Multistream(true)
	// Read in pieces, keeping the tail of the last one, so that a marker
	// across two pieces is found.
	const piece = 64 << 10
	keep := len(marker) - 1
	window := make([]byte, 0, keep+piece)
	var total int64
	for total < MaxInflate {
		k, err := io.ReadFull(zr, window[len(window):len(window)+piece])
		if k > 0 {
			total += int64(k)
			window = window[:len(window)+k]
			if bytes.Contains(window, marker) {
				return true
			}
			tail := min(keep, len(window))
			window = window[:copy(window, window[len(window)-tail:])]
		}
		if err != nil {
			// io.EOF, or io.ErrUnexpectedEOF for a stream cut short (or
			// corrupt): what was read has been searched.
			return false
		}
	}
	return false
}
