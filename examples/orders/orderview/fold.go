package orderview

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/projections"
)

// What the folds share (projections.Folder, issue 35 §3). A fold must
// leave exactly the rows Apply leaves and fail wherever Apply's statements
// fail: a missing row, an unexpected payload, a bigint out of range, a
// CHECK constraint, a text PostgreSQL cannot hold. It checks everything an
// event's statements would check before it changes anything, so a failed
// Add leaves the fold as it was (the rebuild drops it anyway).

// errOutOfRange is PostgreSQL's "bigint out of range": the SQL's bigint
// arithmetic raises it where an int64 would wrap around.
var errOutOfRange = errors.New("bigint out of range")

// orderKey is an order's row key in the tables keyed by order.
type orderKey struct{ tenant, order string }

// addInt64 is a+b, or errOutOfRange where bigint + bigint raises.
func addInt64(a, b int64) (int64, error) {
	s, err := money.Money{Amount: a}.Add(money.Money{Amount: b})
	if err != nil {
		return 0, fmt.Errorf("%w: %d + %d", errOutOfRange, a, b)
	}
	return s.Amount, nil
}

// subInt64 is a-b, or errOutOfRange where bigint - bigint raises.
func subInt64(a, b int64) (int64, error) {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		return 0, fmt.Errorf("%w: %d - %d", errOutOfRange, a, b)
	}
	return d, nil
}

// mulInt64 is a*b, or errOutOfRange where bigint * bigint raises.
func mulInt64(a, b int64) (int64, error) {
	p, err := money.Money{Amount: a}.Mul(b)
	if err != nil {
		return 0, fmt.Errorf("%w: %d * %d", errOutOfRange, a, b)
	}
	return p.Amount, nil
}

// checkTenant is the CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$') of every
// table, which an INSERT's new row must pass (also when it conflicts).
func checkTenant(tenant string) error {
	if len(tenant) < 1 || len(tenant) > 63 {
		return fmt.Errorf("tenant %q violates the tenant_id check constraint", tenant)
	}
	for i := 0; i < len(tenant); i++ {
		if c := tenant[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("tenant %q violates the tenant_id check constraint", tenant)
		}
	}
	return nil
}

// checkText fails for a string PostgreSQL's text refuses (a NUL byte,
// invalid UTF-8): Apply's statement would fail on that parameter.
func checkText(ss ...string) error {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return fmt.Errorf("text %q: invalid byte sequence for encoding UTF8", s)
		}
	}
	return nil
}

// missingRow is what projections.ExpectOne reports when the statement
// changed no row.
func missingRow(what, id string) error {
	return fmt.Errorf("%w: %s %q (0 rows changed, want 1)", projections.ErrMissingRow, what, id)
}

// nullTime is t as a COPY value: NULL unless set.
func nullTime(t time.Time, set bool) any {
	if !set {
		return nil
	}
	return t
}

// appendFolded appends the FoldedTable of a map's rows to out, unless
// there are none. COPY asks for each row's values as it sends the row.
func appendFolded[K comparable, R any](out []projections.FoldedTable, table string, columns []string, rows map[K]*R,
	values func(*R) []any) []projections.FoldedTable {
	if len(rows) == 0 {
		return out
	}
	all := slices.Collect(maps.Values(rows))
	return append(out, projections.FoldedTable{Table: table, Columns: columns,
		Rows: pgx.CopyFromSlice(len(all), func(i int) ([]any, error) { return values(all[i]), nil })})
}

// firstErr is the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
