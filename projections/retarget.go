package projections

import "github.com/jackc/pgx/v5"

// Retargetable is a Projection that can write the same rows into other
// tables of the same shape. A rebuild (`strata replay rebuild`) builds a
// projection into shadow copies of its tables and swaps them in; a new
// projection can reuse another's code under its own tables. Every
// projection of the orders module implements it; a projection that does not
// cannot be rebuilt without downtime.
type Retargetable interface {
	Projection
	// WithTables returns the projection writing into the tables rename
	// maps its tables to (a table not in the map keeps its name).
	WithTables(rename map[string]string) Projection
}

// StreamScoped is a Projection each of whose rows is derived from the
// events of one stream only (the order projections key their rows by
// order, and an order is a stream): the rows of some streams can then be
// re-derived alone, by deleting them and applying those streams' events
// again, in stream order, whatever other streams did meanwhile. `strata
// replay rebuild --from` relies on it. A projection whose rows add up
// events of several streams (customer summaries, daily revenue) must not
// implement it.
type StreamScoped interface {
	Projection
	// DeleteStreams queues statements deleting every row derived from the
	// given streams of tenant (whose setting is in force).
	DeleteStreams(b *pgx.Batch, tenant string, streams []string) error
}
