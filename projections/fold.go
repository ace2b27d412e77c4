package projections

import "github.com/jackc/pgx/v5"

// Folder is a projection whose rows a rebuild may compute in memory
// (issue 35 §3): instead of sending statements for every batch of the log,
// the rebuild folds the events into the final rows and writes each row
// once, by COPY, into the fresh shadow tables, before their secondary
// indexes are built. It is only a faster way to the same rows: the rebuild
// still swaps the tables in, keeps the ledger and leaves `verify --deep`
// to compare the result with the live rows, and whenever a fold cannot
// take an event the rebuild applies the log as the runner does instead.
//
// A projection is a Folder only when its rows depend on nothing but its
// events, in log order per stream (what Apply and ApplyBatch may rely on
// too): the fold starts from empty tables and sees every event of the
// projection's types once, in log order.
type Folder interface {
	Projection
	// NewFold returns an empty fold writing the projection's tables as
	// configured (a Retargetable's shadow names after WithTables).
	NewFold() Fold
}

// Fold folds a projection's events, in log order, into the rows of its
// tables. It must produce exactly the rows Apply would leave after the same
// events (the projectiontest checks compare the two).
type Fold interface {
	// Add folds ev, one of the projection's event types, decoded. An error
	// (or a panic) means the event cannot be applied as Apply would apply
	// it (a missing row, an unexpected payload, an overflow): the rebuild
	// then drops the fold and applies the log event by event, where the
	// event parks its stream as it would in the live runner.
	Add(ev Event) error
	// Rows is how many rows the fold holds: the rebuild stops folding at a
	// batch boundary once it passes its bound, writes what it has, and
	// applies the rest of the log as the runner does.
	Rows() int
	// Tables returns the rows of each table, for COPY; tables without rows
	// may be left out. Called once, after the last Add.
	Tables() []FoldedTable
}

// FoldedTable is one table's folded rows.
type FoldedTable struct {
	// Table is the table's name as configured.
	Table string
	// Columns names the columns Rows gives values for, in order; the other
	// columns take their defaults.
	Columns []string
	// Rows yields the rows (any order).
	Rows pgx.CopyFromSource
}
