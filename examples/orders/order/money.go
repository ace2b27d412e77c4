package order

import "github.com/strata-es/strata/domain/money"

// Money is money.Money under its old name.
//
// Deprecated: use money.Money (domain/money), which every module shares.
// The name stays while code written against order.Money (the fulfilment
// module, branches in flight) moves over; it is the same type, so both
// names mix freely.
type Money = money.Money
