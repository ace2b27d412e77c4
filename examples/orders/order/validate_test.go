package order_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
)

// TestOrderEventsValidate: every order event is an event.Validator, and
// Validate refuses what the decisions never produce.
func TestOrderEventsValidate(t *testing.T) {
	for _, c := range order.Codecs() {
		if _, ok := c.New().(event.Validator); !ok {
			t.Errorf("%s is not an event.Validator", c.Type)
		}
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eur := func(n int64) money.Money { return money.Money{Amount: n, Currency: "EUR"} }
	tests := []struct {
		name   string
		p      event.Validator
		stream string
		want   string // "" valid
	}{
		{"created", order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR", At: at}, "order-o-1", ""},
		{"markup in the order id", order.Created{OrderID: "<b>", CustomerID: "c-1", Currency: "EUR", At: at}, "order-<b>", "order id must match"},
		{"dot-dot", order.Created{OrderID: "..", CustomerID: "c-1", Currency: "EUR", At: at}, "order-..", "order id must match"},
		{"another order's stream", order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR", At: at}, "order-o-2", `in stream "order-o-2"`},
		{"customer", order.Created{OrderID: "o-1", CustomerID: "c 1", Currency: "EUR", At: at}, "order-o-1", "customer id must match"},
		{"currency", order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "eur", At: at}, "order-o-1", "currency"},
		{"no time", order.Created{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"}, "order-o-1", "time is required"},
		{"line", order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: eur(5), At: at}, "order-o-1", ""},
		{"line quantity", order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 0, UnitPrice: eur(5), At: at}, "order-o-1", "quantity"},
		{"line price", order.LineAdded{OrderID: "o-1", ProductID: "p-1", Quantity: 1, UnitPrice: eur(-5), At: at}, "order-o-1", "negative"},
		{"line product", order.LineAdded{OrderID: "o-1", ProductID: "", Quantity: 1, UnitPrice: eur(5), At: at}, "order-o-1", "product id"},
		{"removed", order.LineRemoved{OrderID: "o-1", ProductID: "p/1", At: at}, "order-o-1", "product id"},
		{"placed", order.Placed{OrderID: "o-1", Total: eur(10), At: at}, "order-o-1", ""},
		{"placed total", order.Placed{OrderID: "o-1", Total: money.Money{Amount: 10}, At: at}, "order-o-1", "currency"},
		{"paid", order.Paid{OrderID: "o-1", PaymentReference: "psp-1", Amount: eur(10), At: at}, "order-o-1", ""},
		{"paid reference", order.Paid{OrderID: "o-1", PaymentReference: "psp\x1b[2J", Amount: eur(10), At: at}, "order-o-1", "payment reference"},
		{"cancelled", order.Cancelled{OrderID: "o-1", Reason: "changed mind", At: at}, "order-o-1", ""},
		{"cancelled reason", order.Cancelled{OrderID: "o-1", Reason: strings.Repeat("x", order.MaxReasonLen+1), At: at}, "order-o-1", "reason"},
	}
	for _, tc := range tests {
		err := tc.p.Validate(tc.stream)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, domain.ErrInvalid)):
			t.Errorf("%s: %v, want an ErrInvalid naming %q", tc.name, err, tc.want)
		}
	}
}
