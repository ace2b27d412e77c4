package stock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/inventory/stock"
)

// TestInventoryEventsValidate: every inventory event is an
// event.Validator, and Validate refuses what the decisions never produce.
func TestInventoryEventsValidate(t *testing.T) {
	for _, c := range stock.Codecs() {
		if _, ok := c.New().(event.Validator); !ok {
			t.Errorf("%s is not an event.Validator", c.Type)
		}
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		p      event.Validator
		stream string
		want   string
	}{
		{"received", stock.Received{SKU: "p-1", Quantity: 3, At: at}, "inventory-p-1", ""},
		{"negative", stock.Received{SKU: "p-1", Quantity: -3, At: at}, "inventory-p-1", "quantity"},
		{"markup", stock.Received{SKU: "<i>", Quantity: 3, At: at}, "inventory-<i>", "sku"},
		{"another stream", stock.Received{SKU: "p-1", Quantity: 3, At: at}, "inventory-p-2", `in stream "inventory-p-2"`},
		{"reserved", stock.Reserved{SKU: "p-1", ReservationID: "r-1", Quantity: 1, At: at}, "inventory-p-1", ""},
		{"no reservation", stock.Reserved{SKU: "p-1", Quantity: 1, At: at}, "inventory-p-1", "reservation_id"},
		{"released", stock.Released{SKU: "p-1", ReservationID: "r 1", Quantity: 1, At: at}, "inventory-p-1", "reservation_id"},
		{"committed", stock.Committed{SKU: "p-1", ReservationID: "r-1", Quantity: 1}, "inventory-p-1", "time is required"},
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
