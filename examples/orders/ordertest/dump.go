package ordertest

import (
	"context"
	"testing"

	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/projections/projectiontest"
)

// Dump renders the rows of the given order read-model tables as
// projectiontest.Dump does (from the catalog): the format of the golden
// files and of Expected.
func Dump(ctx context.Context, t testing.TB, adminURL string, tables ...string) string {
	t.Helper()
	return projectiontest.Dump(ctx, t, adminURL, tables...)
}

// Tables lists every order read-model table in dump order.
func Tables() []string {
	var out []string
	for _, p := range orderview.All() {
		out = append(out, p.Tables()...)
	}
	return out
}

// Diff lists the lines only in want (-) and only in got (+)
// (projectiontest.Diff).
func Diff(want, got string) string { return projectiontest.Diff(want, got) }
