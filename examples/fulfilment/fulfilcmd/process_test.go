package fulfilcmd_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd/payhttp"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/ordercmd"
)

// The domain issues its commands and intents as payloads of their own
// (fulfil's ReserveStock, Payment...), since it may import no module's
// write side; what binds them is their JSON. Each must decode, unknown
// fields refused as process.Bind and the payment port decode, into the
// type it is executed as, and encode back to the same JSON: no field
// renamed, lost or added on either side. Each command's name is the
// bound command's.
func TestPayloadsAreTheirCommands(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		payload any
		into    any
		want    string // the command's Name, for commands
	}{
		{fulfil.CommandReserve, fulfil.ReserveStock{SKU: "a", ReservationID: "o-1", Quantity: 2}, &stockcmd.Reserve{}, stockcmd.Reserve{}.Name()},
		{fulfil.CommandRelease, fulfil.ReleaseStock{SKU: "a", ReservationID: "o-1"}, &stockcmd.Release{}, stockcmd.Release{}.Name()},
		{fulfil.CommandCommit, fulfil.CommitStock{SKU: "a", ReservationID: "o-1"}, &stockcmd.Commit{}, stockcmd.Commit{}.Name()},
		{fulfil.CommandPay, fulfil.PayOrder{OrderID: "o-1", PaymentReference: "cap-1"}, &ordercmd.PayOrder{}, ordercmd.PayOrder{}.Name()},
		{fulfil.CommandCancel, fulfil.CancelOrder{OrderID: "o-1", Reason: "out_of_stock"}, &ordercmd.CancelOrder{}, ordercmd.CancelOrder{}.Name()},
		{"capture", fulfil.Payment{Op: fulfil.PaymentCapture, OrderID: "o-1", Amount: 500, Currency: "EUR"}, &payhttp.Request{}, ""},
		{"void", fulfil.Payment{Op: fulfil.PaymentVoid, OrderID: "o-1", CaptureKey: "pm:fulfilment:o-1:capture"}, &payhttp.Request{}, ""},
		// The other way: the port's answer to a capture, read by the domain.
		{"captured", payhttp.Capture{CaptureID: "cap-1", Status: "captured"}, &fulfil.Captured{}, ""},
	} {
		raw, err := json.Marshal(tt.payload)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		if tt.name != "captured" {
			dec.DisallowUnknownFields()
		}
		if err := dec.Decode(tt.into); err != nil {
			t.Errorf("%s: %s does not decode into %T: %v", tt.name, raw, tt.into, err)
			continue
		}
		back, _ := json.Marshal(tt.into)
		if tt.name == "captured" {
			if c := tt.into.(*fulfil.Captured); c.CaptureID != "cap-1" {
				t.Errorf("captured: the domain read %+v of %s", c, raw)
			}
		} else if string(back) != string(raw) {
			t.Errorf("%s: %s comes back from %T as %s", tt.name, raw, tt.into, back)
		}
		if tt.want != "" && tt.want != tt.name {
			t.Errorf("the domain issues %q, bound as %q", tt.name, tt.want)
		}
	}
}
