package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/projections"
)

// connectAdmin connects as the superuser with the strata schema first on
// the search path.
func connectAdmin(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["search_path"] = db.Schema
	cfg.RuntimeParams["timezone"] = "UTC"
	return pgx.ConnectConfig(ctx, cfg)
}

// openingRegistry is every example module's registry with the keyring of
// the database behind q (the admin connection, or a serving pool): it
// opens the sealed personal data of the events it decodes.
func openingRegistry(ctx context.Context, q interface {
	personal.Batcher
	personal.Querier
}) *event.Registry {
	return examples.All().MustRegistry().Protect(personal.NewKeyring(q, personal.DatabaseKEKs(ctx, q, nil), personal.Config{}))
}

// excludedColumns are bookkeeping columns left out of read-model
// checksums, by table. There are none today: read-model timestamps come
// from the events, never from now() (docs/read-side.md), so a rebuild must
// reproduce every column; projection_checkpoints is not a read model and is
// not compared at all.
var excludedColumns = map[string][]string{}

// tableSum is the checksum of one table's rows of one tenant.
type tableSum struct {
	Rows int
	Sum  string
	// First rows, for the report when sums differ.
	Sample []string
}

// checksums returns, per "table/tenant", the SHA-256 of the rows ordered by
// primary key (each row as its JSON object, excluded columns removed).
func checksums(ctx context.Context, conn *pgx.Conn, tables []string) (map[string]tableSum, error) {
	out := map[string]tableSum{}
	for _, table := range tables {
		pk, err := primaryKey(ctx, conn, table)
		if err != nil {
			return nil, err
		}
		excl := "'{}'::text[]"
		if cols := excludedColumns[table]; len(cols) > 0 {
			excl = "ARRAY['" + strings.Join(cols, "','") + "']::text[]"
		}
		q := fmt.Sprintf(`SELECT t.tenant_id, (to_jsonb(t) - %s)::text FROM %s t ORDER BY %s`,
			excl, pgx.Identifier{table}.Sanitize(), strings.Join(pk, ", "))
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("checksum %s: %w", table, err)
		}
		hashes := map[string]*tableSum{}
		hs := map[string]interface {
			io.Writer
			Sum([]byte) []byte
		}{}
		for rows.Next() {
			var tenant, row string
			if err := rows.Scan(&tenant, &row); err != nil {
				rows.Close()
				return nil, err
			}
			ts, ok := hashes[tenant]
			if !ok {
				ts = &tableSum{}
				hashes[tenant] = ts
				hs[tenant] = sha256.New()
			}
			ts.Rows++
			io.WriteString(hs[tenant], row+"\n") //nolint:errcheck
			if len(ts.Sample) < 200 {
				ts.Sample = append(ts.Sample, row)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("checksum %s: %w", table, err)
		}
		for tenant, ts := range hashes {
			ts.Sum = hex.EncodeToString(hs[tenant].Sum(nil))
			out[table+"/"+tenant] = *ts
		}
	}
	return out, nil
}

func primaryKey(ctx context.Context, conn *pgx.Conn, table string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)`, db.Schema, table)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s has no primary key", table)
	}
	for i, c := range cols {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	return cols, nil
}

// rebuildVerdict compares live read models with a rebuild.
type rebuildVerdict struct {
	Compared   int // table/tenant pairs
	Mismatches []string
}

// compareWithRebuild builds the reference: a fresh database with the same
// schema, the live database's events copied in verbatim (same positions,
// same transaction ids, so the same log order), every projection caught up
// from the first event by the projections package itself; then it compares
// per table and tenant the checksum of the rows.
func (e *env) compareWithRebuild(ctx context.Context, liveDB string) (rebuildVerdict, error) {
	return compareWithRebuildOn(ctx, e.cluster(), liveDB)
}

// compareWithRebuildOn is compareWithRebuild for a database of the cluster
// srv; the reference is built on the same cluster, so that the copied
// transaction ids are that cluster's own.
func compareWithRebuildOn(ctx context.Context, srv cluster, liveDB string) (rebuildVerdict, error) {
	var v rebuildVerdict
	refDB := liveDB + "_rebuild"
	if err := createDatabaseOn(ctx, srv, refDB); err != nil {
		return v, err
	}
	refURL := srv.URLFor(refDB)
	if err := db.Up(ctx, refURL, nil, examples.All().Lines()...); err != nil {
		return v, fmt.Errorf("migrate the rebuild database: %w", err)
	}
	live, err := connectAdmin(ctx, srv.URLFor(liveDB))
	if err != nil {
		return v, err
	}
	defer live.Close(context.WithoutCancel(ctx))
	ref, err := connectAdmin(ctx, refURL)
	if err != nil {
		return v, err
	}
	defer ref.Close(context.WithoutCancel(ctx))

	// The keys of the personal data first (the data keys and the KEKs
	// that wrap them): without them, the rebuild would read every sealed
	// field as shredded.
	for _, t := range []string{"strata.key_encryption_keys", "strata.subject_keys"} {
		var keys bytes.Buffer
		if _, err := live.PgConn().CopyTo(ctx, &keys, "COPY "+t+" TO STDOUT"); err != nil {
			return v, fmt.Errorf("copy %s out: %w", t, err)
		}
		if _, err := ref.PgConn().CopyFrom(ctx, &keys, "COPY "+t+" FROM STDIN"); err != nil {
			return v, fmt.Errorf("copy %s in: %w", t, err)
		}
	}

	// COPY keeps the identity column's values (like OVERRIDING SYSTEM
	// VALUE), and tx_id is copied as is: xids are cluster-wide and all of
	// these are in the past, so the rebuild reads the log in the very same
	// order as the live runners did.
	const cols = "position, tx_id, tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata, recorded_at"
	var buf bytes.Buffer
	if _, err := live.PgConn().CopyTo(ctx, &buf, "COPY (SELECT "+cols+" FROM strata.events ORDER BY tx_id, position) TO STDOUT"); err != nil {
		return v, fmt.Errorf("copy events out: %w", err)
	}
	if _, err := ref.PgConn().CopyFrom(ctx, &buf, "COPY strata.events ("+cols+") FROM STDIN"); err != nil {
		return v, fmt.Errorf("copy events in: %w", err)
	}

	app, err := db.OpenPool(ctx, refURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 2, AppName: "chaos-rebuild"})
	if err != nil {
		return v, err
	}
	defer app.Close()
	proj, err := db.OpenPool(ctx, refURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 8, AppName: "chaos-rebuild"})
	if err != nil {
		return v, err
	}
	defer proj.Close()
	store := postgres.New(app, proj)
	head, err := store.Head(ctx)
	if err != nil {
		return v, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := openingRegistry(ctx, app)
	for _, p := range examples.All().Projections() {
		r, err := projections.NewRunner(p, store, proj, projections.RunnerConfig{BatchSize: 2000, Registry: registry, Logger: quiet})
		if err != nil {
			return v, err
		}
		if !head.IsZero() {
			if err := r.CatchUp(ctx, head); err != nil {
				return v, fmt.Errorf("rebuild %s: %w", p.Name(), err)
			}
		}
	}

	tables := examples.All().Tables()
	liveSums, err := checksums(ctx, live, tables)
	if err != nil {
		return v, err
	}
	refSums, err := checksums(ctx, ref, tables)
	if err != nil {
		return v, err
	}
	keys := map[string]bool{}
	for k := range liveSums {
		keys[k] = true
	}
	for k := range refSums {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		v.Compared++
		l, r := liveSums[k], refSums[k]
		if l.Sum == r.Sum {
			continue
		}
		msg := fmt.Sprintf("READ MODEL DIFFERS FROM REBUILD: %s: live %d rows sha256 %.12s, rebuild %d rows sha256 %.12s", k, l.Rows, l.Sum, r.Rows, r.Sum)
		if d := firstDifference(l.Sample, r.Sample); d != "" {
			msg += "; " + d
		}
		v.Mismatches = append(v.Mismatches, msg)
	}
	return v, nil
}

func firstDifference(live, ref []string) string {
	for i := 0; i < len(live) || i < len(ref); i++ {
		var l, r string
		if i < len(live) {
			l = live[i]
		}
		if i < len(ref) {
			r = ref[i]
		}
		if l != r {
			return fmt.Sprintf("first difference at row %d: %s", i+1, rowDiff(l, r))
		}
	}
	return ""
}

// rowDiff names a row by its identifying columns and shows the columns
// whose values differ.
func rowDiff(live, ref string) string {
	var lm, rm map[string]any
	if json.Unmarshal([]byte(live), &lm) != nil || json.Unmarshal([]byte(ref), &rm) != nil {
		return fmt.Sprintf("live %s | rebuild %s", orNone(oneLine(live, 200)), orNone(oneLine(ref, 200)))
	}
	var id, diff []string
	for _, k := range []string{"order_id", "customer_id", "product_id", "day", "currency"} {
		if v, ok := lm[k]; ok {
			id = append(id, fmt.Sprintf("%s=%v", k, v))
		}
	}
	keys := make([]string, 0, len(lm))
	for k := range lm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if fmt.Sprint(lm[k]) != fmt.Sprint(rm[k]) {
			diff = append(diff, fmt.Sprintf("%s live %v rebuild %v", k, lm[k], rm[k]))
		}
	}
	return fmt.Sprintf("live row (%s): %s", strings.Join(id, " "), strings.Join(diff, ", "))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
