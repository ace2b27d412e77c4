package orderview

import "github.com/strata-es/strata/projections"

// All returns the orders module's projections writing into their live
// tables, in a stable order.
func All() []projections.Projection {
	return []projections.Projection{
		NewOrderDetails(OrderDetailsTables{}),
		NewOrderList(OrderListTables{}),
		NewCustomerSummaries(CustomerSummaryTables{}),
		NewDailyRevenue(DailyRevenueTables{}),
	}
}
