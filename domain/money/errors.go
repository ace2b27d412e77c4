package money

import (
	"fmt"

	"github.com/strata-es/strata/domain"
)

// The errors of Money. Each wraps a domain kind, so the HTTP edge answers
// it without knowing money: a malformed currency is bad input (400), an
// impossible sum is a rule that said no (422). Their messages reach API
// clients; a module may re-export them under its own names (the orders
// module's order.ErrAmountOverflow is ErrAmountOverflow).
var (
	ErrInvalidCurrency  = fmt.Errorf("%w: currency must be three upper-case letters", domain.ErrInvalid)
	ErrCurrencyMismatch = fmt.Errorf("%w: amounts are in different currencies", domain.ErrRejected)
	ErrAmountOverflow   = fmt.Errorf("%w: amount is too large", domain.ErrRejected)
)
