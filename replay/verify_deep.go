package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/projections"
)

// DeepVerdict is VerifyDeep's finding for one projection: its rows
// rebuilt from the log into shadow tables, up to the live checkpoint, and
// compared with the live rows.
type DeepVerdict struct {
	Projection string `json:"projection"`
	Tenant     string `json:"tenant,omitempty"` // "" : every tenant
	Checkpoint string `json:"checkpoint"`
	Equal      bool   `json:"equal"`
	// Rows counts the live rows compared; Differing the rows (live or
	// rebuilt) without an equal counterpart.
	Rows      int64 `json:"rows"`
	Differing int64 `json:"differing"`
	// First is the first differing row, by table and primary key.
	First *RowDiff `json:"first,omitempty"`
}

// RowDiff is one row that differs: its table, tenant and key, and the row
// as it is live and as the rebuild made it (nil where there is none).
type RowDiff struct {
	Table   string `json:"table"`
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	Live    string `json:"live,omitempty"`
	Rebuilt string `json:"rebuilt,omitempty"`
}

// VerifyDeep rebuilds each projection (or one tenant of it) into shadow
// tables up to its live checkpoint and diffs the rows, without touching
// the live tables: the live runner pauses only for the last catch-up and
// the comparison. Projections are compared one after the other.
func (s *Service) VerifyDeep(ctx context.Context, o VerifyOptions) ([]DeepVerdict, error) {
	names := o.Projections
	if len(names) == 0 {
		names = s.Names()
	}
	ro := RebuildOptions{Projections: names, Tenant: o.Tenant, Actor: "verify"}
	ps, err := s.check(ro)
	if err != nil {
		return nil, err
	}
	if err := s.CheckOwner(ctx); err != nil {
		return nil, err
	}
	var out []DeepVerdict
	for _, p := range ps {
		d := DeepVerdict{Projection: p.Name(), Tenant: o.Tenant}
		ro.compare = &d
		if _, err := s.rebuildOne(ctx, p, ro, nil, newLagCounts(s.cfg.Log), newTracker(nil, 0)); err != nil {
			return out, fmt.Errorf("deep verify %s: %w", p.Name(), err)
		}
		if err := s.Abort(ctx, p.Name(), o.Tenant); err != nil && !errors.Is(err, ErrNothingToDo) {
			return out, fmt.Errorf("deep verify %s: drop the shadow tables: %w", p.Name(), err)
		}
		out = append(out, d)
	}
	return out, nil
}

// compareShadow builds the shadow up to the live checkpoint, then, holding
// the live lease (the live runner paused), brings it to where the live
// checkpoint stands and compares the tables.
func (s *Service) compareShadow(ctx context.Context, p projections.Projection, runner *projections.Runner, shadowX *projections.Exclusive,
	meta *rebuildMeta, tenant string, d *DeepVerdict) error {
	cps, err := s.checkpoints(ctx, p.Name())
	if err != nil {
		return err
	}
	if err := runner.CatchUpOn(ctx, shadowX, cps[p.Name()].Position); err != nil {
		return err
	}
	liveX, err := s.exclusiveOn(ctx, s.cfg.Owner, p.Name())
	if err != nil {
		return err
	}
	defer liveX.Release()
	if cps, err = s.checkpoints(ctx, p.Name()); err != nil {
		return err
	}
	at := cps[p.Name()].Position
	if err := runner.CatchUpOn(ctx, shadowX, at); err != nil {
		return err
	}
	d.Checkpoint = at.String()
	tenants := []string{tenant}
	if tenant == "" {
		if tenants, err = projections.Tenants(ctx, s.cfg.Pool); err != nil {
			return err
		}
	}
	for _, live := range p.Tables() {
		shadow := meta.Tables[live]
		pk, err := primaryKeyColumns(ctx, s.cfg.Pool, live)
		if err != nil {
			return err
		}
		for _, t := range tenants {
			if err := s.compareTenantRows(ctx, live, shadow, pk, t, d); err != nil {
				return fmt.Errorf("compare %s of tenant %s: %w", live, t, err)
			}
		}
	}
	d.Equal = d.Differing == 0
	return nil
}

func (s *Service) compareTenantRows(ctx context.Context, live, shadow string, pk []string, tenant string, d *DeepVerdict) error {
	var order []string
	for _, c := range pk {
		order = append(order, "r->"+quoteLiteral(c))
	}
	sql := `WITH l AS (SELECT to_jsonb(x) AS r FROM ` + ident(live) + ` x),
     s AS (SELECT to_jsonb(x) AS r FROM ` + ident(shadow) + ` x),
     d AS ((SELECT 'live' AS side, r FROM l EXCEPT ALL SELECT 'live', r FROM s)
           UNION ALL (SELECT 'rebuilt', r FROM s EXCEPT ALL SELECT 'rebuilt', r FROM l))
SELECT (SELECT count(*) FROM l), (SELECT count(*) FROM d),
       (SELECT r::text FROM d ORDER BY ` + strings.Join(order, ", ") + `, side LIMIT 1)`
	return pgx.BeginTxFunc(ctx, s.cfg.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, db.SetTenantSQL, tenant); err != nil {
			return err
		}
		var rows, differing int64
		var row *string
		if err := tx.QueryRow(ctx, sql).Scan(&rows, &differing, &row); err != nil {
			return err
		}
		d.Rows += rows
		d.Differing += differing
		if differing == 0 || d.First != nil || row == nil {
			return nil
		}
		// The first differing key, and the row of each side with that key.
		var key string
		conds := make([]string, len(pk))
		for i, c := range pk {
			conds[i] = "r->" + quoteLiteral(c) + " = (($1::jsonb)->" + quoteLiteral(c) + ")"
		}
		keySQL := `SELECT jsonb_strip_nulls(jsonb_build_object(` + keyPairs(pk) + `))::text FROM (SELECT $1::jsonb AS r) k`
		if err := tx.QueryRow(ctx, keySQL, *row).Scan(&key); err != nil {
			return err
		}
		first := &RowDiff{Table: live, Tenant: tenant, Key: key}
		for _, side := range []struct {
			table string
			into  *string
		}{{live, &first.Live}, {shadow, &first.Rebuilt}} {
			var r string
			err := tx.QueryRow(ctx, `SELECT r::text FROM (SELECT to_jsonb(x) AS r FROM `+ident(side.table)+` x) t WHERE `+
				strings.Join(conds, " AND ")+` LIMIT 1`, *row).Scan(&r)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			*side.into = r
		}
		d.First = first
		return nil
	})
}

func keyPairs(pk []string) string {
	var parts []string
	for _, c := range pk {
		parts = append(parts, quoteLiteral(c)+", r->"+quoteLiteral(c))
	}
	return strings.Join(parts, ", ")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// primaryKeyColumns lists the primary key of a table, in key order.
func primaryKeyColumns(ctx context.Context, q projections.Querier, table string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT a.attname FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n`, ident(table))
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s has no primary key to compare rows by", table)
	}
	return cols, nil
}
