package orderview

import (
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

var (
	_ projections.Retargetable = (*OrderDetails)(nil)
	_ projections.Retargetable = (*OrderList)(nil)
	_ projections.Retargetable = (*CustomerSummaries)(nil)
	_ projections.Retargetable = (*DailyRevenue)(nil)
)

// WithTables implements projections.Retargetable.
func (p *OrderDetails) WithTables(rename map[string]string) projections.Projection {
	return NewOrderDetails(OrderDetailsTables{Orders: projections.Renamed(rename, p.tables.Orders), Lines: projections.Renamed(rename, p.tables.Lines)})
}

// WithTables implements projections.Retargetable.
func (p *OrderList) WithTables(rename map[string]string) projections.Projection {
	return NewOrderList(OrderListTables{Orders: projections.Renamed(rename, p.tables.Orders)})
}

// WithTables implements projections.Retargetable.
func (p *CustomerSummaries) WithTables(rename map[string]string) projections.Projection {
	return NewCustomerSummaries(CustomerSummaryTables{Summaries: projections.Renamed(rename, p.tables.Summaries),
		PaidTotals: projections.Renamed(rename, p.tables.PaidTotals), Orders: projections.Renamed(rename, p.tables.Orders)})
}

// WithTables implements projections.Retargetable.
func (p *DailyRevenue) WithTables(rename map[string]string) projections.Projection {
	return NewDailyRevenue(DailyRevenueTables{Days: projections.Renamed(rename, p.tables.Days)})
}

var (
	_ projections.StreamScoped = (*OrderDetails)(nil)
	_ projections.StreamScoped = (*OrderList)(nil)
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

// DeleteStreams implements projections.StreamScoped.
func (p *OrderDetails) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	ids := orderIDs(streams)
	b.Queue(`DELETE FROM `+projections.Ident(p.tables.Lines)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, ids)
	b.Queue(`DELETE FROM `+projections.Ident(p.tables.Orders)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, ids)
	return nil
}

// DeleteStreams implements projections.StreamScoped.
func (p *OrderList) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	b.Queue(`DELETE FROM `+projections.Ident(p.tables.Orders)+` WHERE tenant_id = $1 AND order_id = ANY($2::text[])`, tenant, orderIDs(streams))
	return nil
}
