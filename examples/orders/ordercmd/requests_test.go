package ordercmd

import (
	"testing"

	"github.com/strata-es/strata/httpapi/decodetest"
)

func TestRequestBodySeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fields []string
		newDst func() any
	}{
		{"createOrderRequest", []string{"order_id", "customer_id", "currency"}, func() any { return new(createOrderRequest) }},
		{"addLineRequest", []string{"product_id", "quantity", "unit_price", "amount", "currency"}, func() any { return new(addLineRequest) }},
		{"payRequest", []string{"payment_reference"}, func() any { return new(payRequest) }},
		{"cancelRequest", []string{"reason"}, func() any { return new(cancelRequest) }},
		{"emptyRequest", []string{"order_id"}, func() any { return new(struct{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range decodetest.Seeds(tc.fields...) {
				decodetest.Check(t, s, tc.newDst)
			}
		})
	}
	// The smuggling attempts that matter, one by one.
	for _, body := range []string{
		`{"customer_id":"c-1","currency":"EUR","Customer_ID":"c-2"}`,
		`{"customer_id":"c-1","currency":"EUR","customer_id":"c-2"}`,
		`{"CUSTOMER_ID":"c-1","currency":"EUR"}`,
		`{"customer_id":"c-1","currency":"EUR","tenant_id":"other"}`,
		`{"customer_id":"c-1","currency":"EUR"}{"customer_id":"c-2"}`,
		"{\"customer_id\":\"c-\xff\",\"currency\":\"EUR\"}",
	} {
		var req createOrderRequest
		if decodetest.Check(t, []byte(body), func() any { return &req }) != nil {
			t.Errorf("createOrderRequest accepted %q", body)
		}
	}
}
