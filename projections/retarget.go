package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/order"
)

// Retargetable is a Projection that can write the same rows into other
// tables of the same shape. A rebuild (`strata replay rebuild`) builds a
// projection into shadow copies of its tables and swaps them in; a new
// projection can reuse another's code under its own tables. Every
// projection of this package implements it; a projection that does not
// cannot be rebuilt without downtime.
type Retargetable interface {
	Projection
	// WithTables returns the projection writing into the tables rename
	// maps its tables to (a table not in the map keeps its name).
	WithTables(rename map[string]string) Projection
}

var (
	_ Retargetable = (*OrderDetails)(nil)
	_ Retargetable = (*OrderList)(nil)
	_ Retargetable = (*CustomerSummaries)(nil)
	_ Retargetable = (*DailyRevenue)(nil)
)

func renamed(rename map[string]string, table string) string {
	if to, ok := rename[table]; ok && to != "" {
		return to
	}
	return table
}

// WithTables implements Retargetable.
func (p *OrderDetails) WithTables(rename map[string]string) Projection {
	return NewOrderDetails(OrderDetailsTables{Orders: renamed(rename, p.tables.Orders), Lines: renamed(rename, p.tables.Lines)})
}

// WithTables implements Retargetable.
func (p *OrderList) WithTables(rename map[string]string) Projection {
	return NewOrderList(OrderListTables{Orders: renamed(rename, p.tables.Orders)})
}

// WithTables implements Retargetable.
func (p *CustomerSummaries) WithTables(rename map[string]string) Projection {
	return NewCustomerSummaries(CustomerSummaryTables{Summaries: renamed(rename, p.tables.Summaries),
		PaidTotals: renamed(rename, p.tables.PaidTotals), Orders: renamed(rename, p.tables.Orders)})
}

// WithTables implements Retargetable.
func (p *DailyRevenue) WithTables(rename map[string]string) Projection {
	return NewDailyRevenue(DailyRevenueTables{Days: renamed(rename, p.tables.Days)})
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

var (
	_ StreamScoped = (*OrderDetails)(nil)
	_ StreamScoped = (*OrderList)(nil)
)

// orderIDs maps order streams to their order IDs (other streams own no
// rows of the order projections).
func orderIDs(streams []string) []string {
	ids := make([]string, 0, len(streams))
	for _, s := range streams {
		if id, ok := order.OrderIDFromStream(s); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// DeleteStreams implements StreamScoped.
func (p *OrderDetails) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	ids := orderIDs(streams)
	b.Queue(`DELETE FROM `+ident(p.tables.Lines)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, ids)
	b.Queue(`DELETE FROM `+ident(p.tables.Orders)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, ids)
	return nil
}

// DeleteStreams implements StreamScoped.
func (p *OrderList) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	b.Queue(`DELETE FROM `+ident(p.tables.Orders)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, orderIDs(streams))
	return nil
}
