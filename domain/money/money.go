package money

import "math"

// Money is an amount in integer minor units (cents for EUR) of one currency.
// Arithmetic never wraps around: an overflow is an ErrAmountOverflow.
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// New returns amount minor units of currency, which must be three
// upper-case letters (ErrInvalidCurrency otherwise). Negative amounts are
// allowed here; rules such as "a unit price is not negative" belong to the
// aggregate that uses the amount.
func New(amount int64, currency string) (Money, error) {
	if !ValidCurrency(currency) {
		return Money{}, ErrInvalidCurrency
	}
	return Money{Amount: amount, Currency: currency}, nil
}

// ValidCurrency reports whether c is three upper-case ASCII letters
// (^[A-Z]{3}$).
func ValidCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// Add returns m+n. Both must have the same currency (ErrCurrencyMismatch);
// a sum outside int64 is ErrAmountOverflow.
func (m Money) Add(n Money) (Money, error) {
	if m.Currency != n.Currency {
		return Money{}, ErrCurrencyMismatch
	}
	sum := m.Amount + n.Amount
	if (n.Amount > 0 && sum < m.Amount) || (n.Amount < 0 && sum > m.Amount) {
		return Money{}, ErrAmountOverflow
	}
	return Money{Amount: sum, Currency: m.Currency}, nil
}

// Mul returns m times qty; a product outside int64 is ErrAmountOverflow.
func (m Money) Mul(qty int64) (Money, error) {
	if m.Amount == 0 || qty == 0 {
		return Money{Amount: 0, Currency: m.Currency}, nil
	}
	p := m.Amount * qty
	// The division check catches every overflow except MinInt64 * -1, whose
	// wrapped result divides back to MinInt64.
	if p/qty != m.Amount || (m.Amount == math.MinInt64 && qty == -1) || (qty == math.MinInt64 && m.Amount == -1) {
		return Money{}, ErrAmountOverflow
	}
	return Money{Amount: p, Currency: m.Currency}, nil
}
