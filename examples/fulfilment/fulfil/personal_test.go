package fulfil_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/fulfilment/fulfil"
	"github.com/strata-es/strata/examples/orders/order"
)

// TestPersonalRedactsAState: what an erasure does to a stored instance
// (event.Redact with fulfil.Personal) leaves a state that still decodes,
// with every payment reference erased and nothing else changed.
func TestPersonalRedactsAState(t *testing.T) {
	s := fulfil.State{OrderID: "o-1", Version: 4, Paid: true, PaymentReference: "psp-9", CaptureRef: "psp-9", Capture: fulfil.StepOK}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	red, n, err := event.Redact(raw, fulfil.Personal, "p")
	if err != nil || n != 2 || strings.Contains(string(red), "psp-9") {
		t.Fatalf("redacted %d fields: %s, %v", n, red, err)
	}
	var got fulfil.State
	if err := json.Unmarshal(red, &got); err != nil {
		t.Fatal(err)
	}
	want := s
	want.PaymentReference, want.CaptureRef = order.ErasedPaymentReference, order.ErasedPaymentReference
	if got.PaymentReference != want.PaymentReference || got.CaptureRef != want.CaptureRef || got.OrderID != "o-1" || got.Version != 4 || got.Capture != fulfil.StepOK {
		t.Fatalf("after the redaction: %+v, want %+v", got, want)
	}
	for _, payload := range []any{fulfil.PayOrder{OrderID: "o-1", PaymentReference: "psp-9"}, fulfil.Captured{CaptureID: "psp-9"}} {
		raw, _ := json.Marshal(payload)
		if red, n, err := event.Redact(raw, fulfil.Personal, "p"); err != nil || n != 1 || strings.Contains(string(red), "psp-9") {
			t.Fatalf("%T redacted: %s %d %v", payload, red, n, err)
		}
	}
}
