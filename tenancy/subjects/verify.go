package subjects

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/personal"
)

// Finding is a place that still holds something of a forgotten subject.
type Finding struct {
	Store string `json:"store"`
	Count int64  `json:"count"`
	What  string `json:"what"`
}

// Verification is what Verify found.
type Verification struct {
	Tenant      string `json:"tenant"`
	SubjectHash string `json:"subject_hash"`
	// ErasureID and KeyID are the subject's last finished erasure's.
	ErasureID string `json:"erasure_id,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	// Columns is how many columns of the tenant's tables were scanned.
	Columns  int       `json:"columns_scanned"`
	Findings []Finding `json:"findings"`
}

// OK reports whether nothing of the subject was found.
func (v Verification) OK() bool { return len(v.Findings) == 0 && v.ErasureID != "" }

// Verify checks that a subject of the tenant is forgotten: that it has a
// finished erasure, that no data key can open what the erasure's key
// sealed (it is gone, and the subject has no key since), and that no
// column of any of the tenant's tables (the log, idempotency records, dead
// letters, read models, process-manager state; not the erasures' own
// records) holds the subject's ID in plaintext; and, on the subject's
// streams, that no event holds a declared field in plaintext, no process
// instance a declared field other than its tombstone, and no free text
// beside them is left (fieldFindings). The broker holds the log's sealed
// fields (Erase's receipt, "relay"), which the destroyed key was the only
// way to open; with Config.Broker, its messages are checked as the log is
// (brokerFindings).
func (e *Eraser) Verify(ctx context.Context, tenant domain.TenantID, subject string) (Verification, error) {
	t := string(tenant)
	hash := personal.SubjectHash(t, subject)
	v := Verification{Tenant: t, SubjectHash: hash, Findings: []Finding{}}
	// The eraser reads every table with a tenant_id (a rebuild's shadow
	// tables made since the last migration too).
	if _, err := db.EnsureEraserGrants(ctx, e.cfg.Owner); err != nil {
		return v, err
	}
	var streams []string // the subject's streams
	err := e.eraserTx(ctx, t, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT erasure_id::text, key_id FROM subject_erasures WHERE tenant_id = $1 AND subject_hash = $2 AND finished_at IS NOT NULL
ORDER BY finished_at DESC LIMIT 1`, t, hash).Scan(&v.ErasureID, &v.KeyID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if v.ErasureID == "" {
			v.Findings = append(v.Findings, Finding{Store: "subject_erasures", What: "the subject has no finished erasure"})
		}
		var keys int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM subject_keys WHERE tenant_id = $1 AND (subject_hash = $2 OR key_id = $3)`, t, hash, v.KeyID).Scan(&keys); err != nil {
			return err
		}
		if keys > 0 {
			v.Findings = append(v.Findings, Finding{Store: "keys", Count: keys, What: "a data key of the subject: what it sealed can be opened"})
		}
		if v.KeyID != "" {
			if streams, err = subjectStreams(ctx, tx, t, v.KeyID); err != nil {
				return err
			}
			found, err := e.fieldFindings(ctx, tx, t, v.KeyID, streams)
			if err != nil {
				return err
			}
			v.Findings = append(v.Findings, found...)
		}
		cols, err := textColumns(ctx, tx)
		if err != nil {
			return err
		}
		for _, c := range cols {
			v.Columns++
			var n int64
			q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE tenant_id = $1 AND strpos(%s::text, $2) > 0`, pgx.Identifier{c.table}.Sanitize(), pgx.Identifier{c.column}.Sanitize())
			if err := tx.QueryRow(ctx, q, t, subject).Scan(&n); err != nil {
				return fmt.Errorf("scan %s.%s: %w", c.table, c.column, err)
			}
			if n > 0 {
				v.Findings = append(v.Findings, Finding{Store: "table:" + c.table + "." + c.column, Count: n, What: "rows holding the subject's ID in plaintext"})
			}
		}
		return nil
	})
	if err == nil && e.cfg.Broker != nil {
		var found []Finding
		found, err = e.brokerFindings(ctx, t, subject, streams)
		v.Findings = append(v.Findings, found...)
	}
	if err != nil {
		return v, fmt.Errorf("verify a subject of %s: %w", t, err)
	}
	return v, nil
}

type column struct{ table, column string }

// textColumns lists the text, JSON and character columns of strata's
// tables that have a tenant_id, but the erasures' own records.
func textColumns(ctx context.Context, tx pgx.Tx) ([]column, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname, a.attname FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND a.attname <> 'tenant_id'
  AND a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'jsonb'::regtype, 'json'::regtype, 'bpchar'::regtype)
  AND c.relname <> 'subject_erasures'
  AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attname = 'tenant_id' AND NOT t.attisdropped)
ORDER BY c.relname, a.attnum`, db.Schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.column)
	})
}
